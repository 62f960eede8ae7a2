#!/usr/bin/env bash
# The broker binaries durachk starts its private instances from, for the
# kinds in $BROKERS (redis postgres mariadb rabbitmq nats): what is already
# there is used; what is missing comes from Ubuntu's packages, installed
# without starting their services (a policy-rc.d that refuses every start),
# so that nothing takes the ports of the brokers under test.
set -euo pipefail
run() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
has() { command -v "$1" >/dev/null 2>&1 || compgen -G "$2" >/dev/null; }
pkgs=()
for b in ${BROKERS:-}; do
  case "$b" in
    redis) has redis-server /usr/bin/redis-server || pkgs+=(redis-server) ;;
    postgres) has initdb '/usr/lib/postgresql/*/bin/initdb' || pkgs+=(postgresql) ;;
    mariadb) has mariadbd /usr/sbin/mariadbd || pkgs+=(mariadb-server) ;;
    rabbitmq) has rabbitmq-server /usr/lib/rabbitmq/bin/rabbitmq-server || pkgs+=(rabbitmq-server) ;;
    nats) ;; # durachk embeds nats-server
    *)
      echo "brokers: unknown broker kind '$b' (want redis, postgres, mariadb, rabbitmq or nats)" >&2
      exit 3
      ;;
  esac
done
# durability.power-loss puts the private broker on a FUSE file system.
[ -e /dev/fuse ] || echo "brokers: no /dev/fuse: durability.power-loss will be skipped" >&2
if [ "${#pkgs[@]}" -eq 0 ]; then
  echo "brokers: ${BROKERS:-none} already here"
  exit 0
fi
echo "brokers: installing ${pkgs[*]}"
printf '#!/bin/sh\nexit 101\n' | run tee /usr/sbin/policy-rc.d >/dev/null
run chmod +x /usr/sbin/policy-rc.d
trap 'run rm -f /usr/sbin/policy-rc.d' EXIT
run apt-get update -qq
run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
