#!/usr/bin/env bash
# Creates the project's virtual environment (first argument, default .venv) and installs
# the project with the extras the second argument names (default train: what a night needs; make test
# adds dev). Without an NVIDIA GPU, torch is installed from a CPU build first, so that the dependency
# resolver never pulls a multi-GB CUDA build.
set -euo pipefail
venv="${1:-.venv}"
extras="${2:-train}"
python="${PYTHON:-python3}"

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

if ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "${pip[@]}" install torch
  elif ! "${pip[@]}" install "torch==2.13.0+cpu"; then  # a CPU wheel from a local wheel directory
    "${pip[@]}" install torch --extra-index-url https://download.pytorch.org/whl/cpu
  fi
fi
"${pip[@]}" install -e ".[$extras]"
