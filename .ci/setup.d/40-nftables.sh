# Sourced by .ci/run: nft for the partitions between a private RabbitMQ
# cluster's nodes (internal/targets/nft.go). Installs Debian's nftables only
# when nft is missing; without it the partition tests skip with the reason.
if ! command -v nft >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    log "installing nftables"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq nftables >/dev/null 2>&1; then
      apt-get update -qq >/dev/null 2>&1 || true
      apt-get install -y -qq nftables >/dev/null 2>&1 || log "nftables could not be installed; RabbitMQ partition tests will skip"
    fi
  else
    log "no apt-get; RabbitMQ partition tests will skip"
  fi
fi
