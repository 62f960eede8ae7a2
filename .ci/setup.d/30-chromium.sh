# Sourced by .ci/run: headless Chromium for the HTML evidence page's render test
# (internal/cli TestHTMLInChromium). Idempotent and quiet: installs Debian's
# chromium only when /usr/bin/chromium is missing, and refreshes the package
# lists only when apt cannot find the package.
if [ ! -x /usr/bin/chromium ]; then
  if command -v apt-get >/dev/null 2>&1; then
    log "installing chromium"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq chromium >/dev/null 2>&1; then
      apt-get update -qq >/dev/null 2>&1 || true
      apt-get install -y -qq chromium >/dev/null 2>&1 || log "chromium could not be installed; the render test will skip"
    fi
  else
    log "no apt-get; the Chromium render test will skip"
  fi
fi
