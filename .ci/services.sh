# Sourced by .ci/run and tools/bench-stability.sh (bash, from the repo root;
# `log` exists): makes sure the shared local services the tests need are up and
# exports their URLs (DURACHK_PG_URL, DURACHK_REDIS_URL, DURACHK_AMQP_URL,
# DURACHK_NATS_URL, DURACHK_MYSQL_URL), each only where its server is
# installed.
#
# This machine kind starts them before the session; start them again only if
# they are down (never reconfigure or kill them).
if command -v pg_isready >/dev/null 2>&1; then
  if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
    log "postgres is down, starting it"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
    for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
  fi
  export DURACHK_PG_URL="${DURACHK_PG_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
fi

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if command -v redis-server >/dev/null 2>&1; then
  if ! port_open 6379; then
    log "redis is down, starting it as this machine kind does"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
    for _ in $(seq 1 30); do port_open 6379 && break; sleep 1; done
  fi
  export DURACHK_REDIS_URL="${DURACHK_REDIS_URL:-redis://127.0.0.1:6379/0}"
fi

if command -v rabbitmq-server >/dev/null 2>&1; then
  if ! port_open 5672; then
    log "rabbitmq is down, starting it as this machine kind does"
    rabbitmq-server -detached || true
    for _ in $(seq 1 60); do port_open 5672 && break; sleep 1; done
  fi
  export DURACHK_AMQP_URL="${DURACHK_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}"
fi

if [ -x /usr/sbin/nats-server ] || command -v nats-server >/dev/null 2>&1; then
  if ! port_open 4222; then
    log "nats is down, starting it as this machine kind does"
    mkdir -p /var/lib/nats-server
    start-stop-daemon --start --oknodo --background --exec "$(command -v nats-server || echo /usr/sbin/nats-server)" -- \
      -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log || true
    for _ in $(seq 1 30); do port_open 4222 && break; sleep 1; done
  fi
  export DURACHK_NATS_URL="${DURACHK_NATS_URL:-nats://127.0.0.1:4222}"
fi

if command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; then
  if ! port_open 3306; then
    log "mariadb is down, starting it as this machine kind does"
    service mariadb start >/dev/null 2>&1 || /etc/init.d/mariadb start >/dev/null 2>&1 || true
    for _ in $(seq 1 30); do port_open 3306 && break; sleep 1; done
  fi
  export DURACHK_MYSQL_URL="${DURACHK_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}"
fi
