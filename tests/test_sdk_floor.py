"""The provider code against the oldest SDKs pyproject.toml allows: the floors of anthropic and openai are
installed beside the environment (once, from the package index) and the provider and loopback-server tests
run again with them first on the path. The newest SDKs are what the environment itself installs."""

import os
import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
# The provider code and the services' rules through the SDKs (the server's own wire-format tests pin details of
# the newest SDKs, such as the headers they send, and are not repeated).
SUITES = ["tests/test_llm_server_refusals.py", "tests/test_llm_server_claude_rules.py",
          "tests/test_llm_server_openai.py", "tests/agent/llm"]
EXTRAS = ["distro", "tqdm"]  # needed by the old SDKs, not by the new ones the environment has


def floors() -> dict[str, str]:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = {}
    for requirement in dependencies:
        match = re.fullmatch(r"(anthropic|openai)>=([\d.]+)", requirement.strip())
        if match:
            found[match[1]] = match[2]
    return found


def floor_environment() -> Path:
    pinned = floors()
    target = Path(sys.prefix) / "sdk-floor" / "-".join(f"{name}{version}" for name, version in sorted(pinned.items()))
    if not (target / ".complete").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                        *(f"{name}=={version}" for name, version in pinned.items()), *EXTRAS], check=True)
        (target / ".complete").touch()
    return target


def test_the_providers_work_with_the_oldest_sdks_allowed():
    pinned = floors()
    assert set(pinned) == {"anthropic", "openai"}, "pyproject.toml must give both SDKs a floor (name>=version)"
    target = floor_environment()
    env = dict(os.environ, PYTHONPATH=str(target))
    versions = subprocess.run([sys.executable, "-c", "import anthropic, openai; "
                               "print(anthropic.__version__, openai.__version__)"],
                              capture_output=True, text=True, env=env, cwd=ROOT)
    assert versions.stdout.split() == [pinned["anthropic"], pinned["openai"]], versions.stderr
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", *SUITES],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
