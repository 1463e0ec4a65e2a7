#!/usr/bin/env bash
# The GPU check in one command, on one CUDA GPU (H100/H200: at most 10 minutes), from the repository root:
#
#     bash scripts/gpu_check.sh [OUT_FILE] [-- options of benchmarks/gpu_check.py]
#
# Everything it measures and prints goes to OUT_FILE (default gpu_check-<host>-<time>.txt) and to the
# terminal: the environment, which FlashAttention-3 builds load (offline and without the `kernels` package
# it measures the FlexAttention path and says so), the hardware profiles, then a short night through
# `autoresearch run` (sandbox, cold compiles, the trusted evaluator measuring the night's tolerances, the
# landing, the holdout confirmation). Set PYTHON to choose the interpreter (default .venv/bin/python, else
# python3). `--smoke` walks the same phases on CPU with the test track.
set -uo pipefail
cd "$(dirname "$0")/.."
out="gpu_check-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ).txt"
if [ $# -gt 0 ] && [ "$1" != "--" ] && [ "${1#-}" = "$1" ]; then out="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
{
  echo "== gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "== nvidia-smi"
  nvidia-smi 2>&1 || echo "(nvidia-smi is not available)"
  missing=$("$python" -c 'import importlib.util as u; print(" ".join(m for m in ("torch", "numpy", "pyarrow", "tiktoken", "rustbpe", "pydantic", "git") if u.find_spec(m) is None))' 2>&1) \
    || missing="python itself ($python)"
  if [ -n "$missing" ]; then
    echo "missing: $missing. Install the project first (bash scripts/setup_venv.sh .venv, which installs a CUDA torch where nvidia-smi works), or set PYTHON to an interpreter that has it."
    exit 2
  fi
  timeout --kill-after=10 590 "$python" benchmarks/gpu_check.py "$@"
  status=$?
  echo "== exit status $status$([ $status = 124 ] && echo ' (stopped at 10 minutes)')"
  exit $status
} 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
echo "results: $out"
exit "$status"
