#!/usr/bin/env bash
# The setup of deploy/skypilot.yaml, on every node: the project with its train and ray extras (torch, and the
# one Ray version the agent and every node share) in a virtual environment of its own, at the versions of
# docker/constraints.txt, and bubblewrap to isolate runs. Run from the synced workdir (the repository root).
# AUTORESEARCH_VENV: where the environment goes (default ~/autoresearch-venv); one already there is reused.
# AUTORESEARCH_CONSTRAINTS: the pip constraints file (default docker/constraints.txt, the images' versions).
set -euo pipefail
venv="${AUTORESEARCH_VENV:-$HOME/autoresearch-venv}"
python="${PYTHON:-python3}"
constraints="${AUTORESEARCH_CONSTRAINTS:-docker/constraints.txt}"

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip --disable-pip-version-check install -q -c "$constraints" -e '.[train,ray]'

if ! command -v bwrap >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo apt-get -qq update && sudo apt-get -qq install -y bubblewrap >/dev/null \
      || echo "note: bubblewrap did not install; runs on this node will not be isolated (each result says so)"
  else
    echo "note: no bubblewrap and no apt-get with sudo here; runs on this node will not be isolated"
  fi
fi
"$venv/bin/python" -c "import ray, torch; print(f'node ready: ray {ray.__version__}, torch {torch.__version__}')"
