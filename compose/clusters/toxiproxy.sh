#!/bin/sh
# toxiproxy.sh ACTION NODE — the network faults of clusters.yml's nodes,
# through Toxiproxy's HTTP API (curl). Every connection to a node goes
# through a proxy named after the links it carries (toxiproxy-host.json for
# Redis, API 127.0.0.1:8474; toxiproxy.json for Postgres, API 127.0.0.1:8475):
#
#   NODE        the clients' link to NODE (and, for Redis, every connection to
#               it: the Sentinels' and the replicas' that sync from it)
#   X-to-NODE   X's link to NODE (Postgres: the peer's replication when NODE
#               leads, the watcher's look at NODE)
#   NODE-to-X   NODE's link to X (its replication when X leads)
#
#   partition   a timeout toxic (timeout 0) on both streams of every proxy of
#               NODE: nothing passes either way and no connection is closed,
#               as on a cut network; what was sent waits until the heal
#   heal        removes those toxics
#   lag         a latency toxic (LAG_MS, default 200) on what NODE sends: the
#               downstream of NODE and X-to-NODE, the upstream of NODE-to-X
#   unlag       removes it
#
# Removing a toxic that is not there succeeds: heal and unlag can always run.
set -eu
here=$(dirname "$0")
lag=${LAG_MS:-200}
action=${1:?usage: toxiproxy.sh ACTION NODE}
node=${2:?usage: toxiproxy.sh ACTION NODE}

# proxies FILE: the names of the proxies FILE creates.
proxies() { sed -n 's/.*"name": *"\([^"]*\)".*/\1/p' "$1"; }

found=
for pair in "toxiproxy-host.json 8474" "toxiproxy.json 8475"; do
	set -- $pair
	api=http://127.0.0.1:$2
	for p in $(proxies "$here/$1"); do
		case $p in
		"$node") mine=in ;;
		*-to-"$node") mine=in ;;
		"$node"-to-*) mine=out ;;
		*) continue ;;
		esac
		found=1
		add() { # add NAME TYPE STREAM ATTRIBUTES
			curl -fsS -o /dev/null -X POST -H 'Content-Type: application/json' "$api/proxies/$p/toxics" \
				-d "{\"name\": \"$1\", \"type\": \"$2\", \"stream\": \"$3\", \"toxicity\": 1.0, \"attributes\": $4}"
		}
		del() { # del NAME: 204, or 404 when it is not there
			code=$(curl -sS -o /dev/null -w '%{http_code}' -X DELETE "$api/proxies/$p/toxics/$1")
			case $code in 204 | 404) ;; *) echo "toxiproxy.sh: DELETE $p/toxics/$1: HTTP $code" >&2; exit 1 ;; esac
		}
		case $action in
		partition)
			add durachk-partition-up timeout upstream '{"timeout": 0}'
			add durachk-partition-down timeout downstream '{"timeout": 0}'
			;;
		heal)
			del durachk-partition-up
			del durachk-partition-down
			;;
		lag)
			if [ $mine = in ]; then stream=downstream; else stream=upstream; fi
			add durachk-lag latency $stream "{\"latency\": $lag, \"jitter\": 0}"
			;;
		unlag) del durachk-lag ;;
		*)
			echo "toxiproxy.sh: unknown action $action (partition heal lag unlag)" >&2
			exit 2
			;;
		esac
	done
done
[ -n "$found" ] || { echo "toxiproxy.sh: no proxy of $node" >&2; exit 2; }
