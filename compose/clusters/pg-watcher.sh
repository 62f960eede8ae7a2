#!/bin/sh
# Promotes a standby when no node of NODES has answered as primary for about
# a second (4 looks, 250 ms apart): what Patroni or an operator would do.
# NODES lists them as NAME=HOST:PORT (or a bare host name: port 5432), each
# reached the way a partition of that node cuts it (a Toxiproxy link in
# clusters.yml).
# It never demotes: a deposed primary rejoins as a standby when it starts
# again (pg-node.sh). Its decisions go to `docker compose logs pg-watcher`.
set -u
export PGCONNECT_TIMEOUT=1
misses=0
touch /tmp/watching
while :; do
	primary= standby= standby_h= standby_p=
	for node in $NODES; do
		n=${node%%=*} hp=${node#*=} h=${node#*=} p=5432
		case $hp in *:*) h=${hp%:*} p=${hp##*:} ;; esac
		case "$(psql -h "$h" -p "$p" -U postgres -d postgres -XAtc 'select pg_is_in_recovery()' 2>/dev/null)" in
		f) primary=$n ;;
		t) standby=$n standby_h=$h standby_p=$p ;;
		esac
	done
	if [ -n "$primary" ] || [ -z "$standby" ]; then
		misses=0
	else
		misses=$((misses + 1))
		if [ "$misses" -ge 4 ]; then
			echo "pg-watcher: no primary for 1 s: promoting $standby"
			psql -h "$standby_h" -p "$standby_p" -U postgres -d postgres -XAtc 'select pg_promote(true, 10)' || true
			misses=0
		fi
	fi
	sleep 0.25
done
