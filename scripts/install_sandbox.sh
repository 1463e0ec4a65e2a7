#!/usr/bin/env bash
# Installs Debian's bubblewrap, which runs each train.py as a stranger (trainer/sandbox.py), when it is
# missing and this machine can (root with apt-get). Elsewhere `autoresearch run` says that runs are not
# isolated, and how to fix it.
set -u
command -v bwrap >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
    || echo "note: could not install bubblewrap; runs will not be isolated"
fi
exit 0
