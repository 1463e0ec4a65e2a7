#!/usr/bin/env bash
# Installs SkyPilot (pinned) into a virtual environment of its own, .venv-skypilot/ beside the project:
# its dependencies cannot share the project's (skypilot 0.14.1 wants click<8.2, huggingface_hub
# wants click>=8.4.2). The tests load deploy/skypilot.yaml with it. Without it they say so and skip.
# Usage: skypilot_venv.sh [VENV]
set -u
venv="${1:-.venv-skypilot}"
package="skypilot==0.14.1"
stamp="$venv/.installed-$package"
[ -e "$stamp" ] && exit 0
python="${PYTHON:-python3}"
if [ -x "$venv/bin/python" ] || "$python" -m venv "$venv" \
    && "$venv/bin/python" -m pip --disable-pip-version-check install -q "$package" >/dev/null 2>&1; then
  touch "$stamp"
else
  echo "note: could not install $package into $venv; the test that loads deploy/skypilot.yaml will be skipped"
fi
exit 0
