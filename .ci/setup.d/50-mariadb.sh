# Sourced by .ci/run: MariaDB for the mysql target (adapters/mysql, its private
# servers and clusters) and Galera for its private clusters. This machine kind
# runs a shared MariaDB on 127.0.0.1:3306 (root without a password from
# 127.0.0.1, database test), which .ci/run starts if it is down and never
# reconfigures. Where the server is missing it is installed here (with
# galera-4 and rsync, which its state transfers use), started, and given that
# same account.
mariadb_fresh=0
if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
  if command -v apt-get >/dev/null 2>&1; then
    log "installing mariadb-server, galera-4 and rsync"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq mariadb-server galera-4 rsync >/dev/null 2>&1; then
      apt-get update -qq >/dev/null 2>&1 || true
      apt-get install -y -qq mariadb-server galera-4 rsync >/dev/null 2>&1 || log "mariadb could not be installed; the mysql tests will skip"
    fi
    mariadb_fresh=1
  else
    log "no apt-get; the mysql tests will skip"
  fi
fi
if command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; then
  if ! port_open 3306; then
    log "mariadb is down, starting it as this machine kind does"
    service mariadb start >/dev/null 2>&1 || /etc/init.d/mariadb start >/dev/null 2>&1 || true
    for _ in $(seq 1 30); do port_open 3306 && break; sleep 1; done
  fi
  if [ "$mariadb_fresh" = 1 ]; then
    mariadb -uroot -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; CREATE DATABASE IF NOT EXISTS test;" >/dev/null 2>&1 \
      || log "could not give root@127.0.0.1 access to the new mariadb"
  fi
  if port_open 3306; then
    export DURACHK_MYSQL_URL="${DURACHK_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}"
  fi
fi
