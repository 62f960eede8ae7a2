#!/bin/sh
# sentinel.sh PORT — a Sentinel on 127.0.0.1:PORT watching the primary
# redis-1 through its Toxiproxy port (127.0.0.1:17001) as "durachk": quorum
# 2, down after 500 ms.
# failover-timeout 60 s: the Sentinels leave a replica where it is for a
# minute after a failover instead of moving it again mid-run. A Sentinel
# rewrites its configuration file, so it gets a fresh copy at every start.
set -eu
port=$1
conf=/tmp/sentinel-$port.conf
cat >"$conf" <<CONF
bind 127.0.0.1
port $port
sentinel monitor durachk 127.0.0.1 17001 2
sentinel down-after-milliseconds durachk 500
sentinel failover-timeout durachk 60000
sentinel parallel-syncs durachk 1
CONF
exec redis-server "$conf" --sentinel
