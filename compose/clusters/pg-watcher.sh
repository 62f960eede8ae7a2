#!/bin/sh
# Promotes a standby when no node of NODES has answered as primary for about
# a second (4 looks, 250 ms apart): what Patroni or an operator would do.
# It never demotes: a deposed primary rejoins as a standby when it starts
# again (pg-node.sh). Its decisions go to `docker compose logs pg-watcher`.
set -u
export PGCONNECT_TIMEOUT=1
misses=0
touch /tmp/watching
while :; do
	primary= standby=
	for n in $NODES; do
		case "$(psql -h "$n" -U postgres -d postgres -XAtc 'select pg_is_in_recovery()' 2>/dev/null)" in
		f) primary=$n ;;
		t) standby=$n ;;
		esac
	done
	if [ -n "$primary" ] || [ -z "$standby" ]; then
		misses=0
	else
		misses=$((misses + 1))
		if [ "$misses" -ge 4 ]; then
			echo "pg-watcher: no primary for 1 s: promoting $standby"
			psql -h "$standby" -U postgres -d postgres -XAtc 'select pg_promote(true, 10)' || true
			misses=0
		fi
	fi
	sleep 0.25
done
