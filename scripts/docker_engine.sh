#!/usr/bin/env bash
# A private Docker engine for the deployment test, which never touches the host's network:
# no bridge, no iptables, no forwarding. Everything it keeps lies under one directory.
#
#   scripts/docker_engine.sh start DIR   starts dockerd on unix://DIR/docker.sock, waits for it
#   scripts/docker_engine.sh stop DIR    stops that dockerd (by its pid file) and its containers
#   scripts/docker_engine.sh base DIR    imports the Debian base image (mmdebstrap) when missing
set -euo pipefail
cmd="${1:?usage: docker_engine.sh start|stop|base DIR}"
dir="$(realpath -m "${2:?usage: docker_engine.sh start|stop|base DIR}")"
sock="$dir/docker.sock"
# exec-root must be short (containerd's sockets live there) and is left empty when the engine stops.
exec_root="/run/ar-docker-$(echo "$dir" | sha1sum | cut -c1-8)"
export DOCKER_HOST="unix://$sock"

case "$cmd" in
start)
  mkdir -p "$dir/data"
  if [ -f "$dir/dockerd.pid" ] && kill -0 "$(cat "$dir/dockerd.pid")" 2>/dev/null; then
    exit 0
  fi
  mkdir -p "$exec_root"
  setsid dockerd --data-root "$dir/data" --exec-root "$exec_root" --pidfile "$dir/dockerd.pid" \
    -H "unix://$sock" --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false --bridge=none \
    --containerd-namespace ar-test --containerd-plugins-namespace ar-test-plugins \
    >"$dir/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 120); do
    docker version >/dev/null 2>&1 && exit 0
    sleep 0.5
  done
  echo "dockerd did not answer on $sock within 60 s; its log:" >&2
  tail -30 "$dir/dockerd.log" >&2
  exit 1
  ;;
stop)
  pid="$(cat "$dir/dockerd.pid" 2>/dev/null || true)"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    ids="$(docker ps -q 2>/dev/null || true)"
    [ -z "$ids" ] || docker kill $ids >/dev/null 2>&1 || true
    kill "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
  fi
  rm -f "$dir/dockerd.pid"
  # dockerd leaves its network-namespace handle mounted there
  awk -v root="$exec_root/" 'index($2, root) == 1 {print $2}' /proc/mounts | sort -r | while read -r mount; do
    umount "$mount" || true
  done
  rm -rf "$exec_root"
  ;;
base)
  image="${3:-autoresearch-test/debian:bookworm}"
  docker image inspect "$image" >/dev/null 2>&1 && exit 0
  mmdebstrap --quiet --variant=minbase --include=ca-certificates bookworm - | docker import - "$image" >/dev/null
  ;;
*)
  echo "usage: docker_engine.sh start|stop|base DIR" >&2
  exit 2
  ;;
esac
