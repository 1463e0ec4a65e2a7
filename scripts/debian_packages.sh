#!/usr/bin/env bash
# Installs Debian packages when the command that needs them is missing and this machine can
# (root with apt-get). Elsewhere nothing is installed, and what needs them says so when it runs.
# Usage: debian_packages.sh COMMAND "what happens without them" PACKAGE...
set -u
needed="$1" without="$2"
shift 2
command -v "$needed" >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@") >/dev/null 2>&1 \
    || echo "note: could not install $*; $without"
fi
exit 0
