#!/usr/bin/env bash
# Installs Debian's chromium for the report's browser test when it is missing and this
# machine can (root with apt-get). Elsewhere the test skips and says why.
set -u
command -v chromium >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "note: could not install chromium; the browser test of the report will be skipped"
fi
exit 0
