"""Runners execute one commit of a workspace and report what happened.

LocalRunner: the commit's files are exported into a fresh run directory (never the
workspace itself), `python train.py` runs there in its own session with an environment
built from an allowlist (no API keys), its output streams to logs/<id>.log, and a hard
timeout kills the whole process group, plus any process that escaped the group but still
carries the run's token in its environment. After the run the frozen files of the run
directory are hashed against the workspace's root commit.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.triage import Verdict, classify, parse_model_config
from agent.workspace import FROZEN, Workspace

ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "VIRTUAL_ENV",
                 "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "NVIDIA_VISIBLE_DEVICES",
                 "HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                 "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF", "AUTORESEARCH_CACHE")
ENV_PREFIXES = ("LC_",)
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.IGNORECASE)
RUN_TOKEN_VAR = "AUTORESEARCH_RUN_TOKEN"
LOG_HEAD_LINES, LOG_TAIL_LINES = 40, 60


@dataclass
class RunResult:
    returncode: int | None
    timed_out: bool
    log_path: Path
    verdict: Verdict
    seconds: float
    head: str
    tail: str
    frozen_changed: list[str] = field(default_factory=list)
    model_config: dict = field(default_factory=dict)

    @property
    def summary(self) -> dict[str, str]:
        return self.verdict.summary


def scrubbed_environment(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOWLIST or k.startswith(ENV_PREFIXES)}
    env.update(extra)
    env.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
    return {k: v for k, v in env.items() if not SECRET_NAME.search(k) or k == RUN_TOKEN_VAR}


def processes_with_token(token: str) -> list[int]:
    """Pids whose environment carries this run's token (Linux /proc; empty elsewhere)."""
    needle = f"{RUN_TOKEN_VAR}={token}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_run(process: subprocess.Popen, token: str) -> None:
    """SIGKILL the run's process group and every process still carrying its token."""
    for _ in range(50):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stragglers = [pid for pid in processes_with_token(token) if pid != os.getpid()]
        for pid in stragglers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if process.poll() is None:
            try:
                process.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                continue
        if not stragglers:
            return
        time.sleep(0.05)


def read_head_tail(path: Path) -> tuple[str, str]:
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(lines[:LOG_HEAD_LINES]), "\n".join(lines[-LOG_TAIL_LINES:])


class LocalRunner:
    name = "local"

    def __init__(self, python: str = sys.executable, seed: int = 42):
        self.python = python
        self.seed = seed

    def run(self, workspace: Workspace, commit: str, timeout: float, experiment_id: str) -> RunResult:
        run_dir = workspace.dir / "runs" / experiment_id
        shutil.rmtree(run_dir, ignore_errors=True)
        workspace.export(commit, run_dir)
        log_path = workspace.dir / "logs" / f"{experiment_id}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(8)
        env = scrubbed_environment({RUN_TOKEN_VAR: token, "AUTORESEARCH_SEED": str(self.seed),
                                    "AUTORESEARCH_CACHE": os.environ.get("AUTORESEARCH_CACHE", str(
                                        Path("~/.cache/autoresearch").expanduser()))})
        start = time.perf_counter()
        timed_out = False
        with open(log_path, "wb") as log:
            process = subprocess.Popen([self.python, "train.py"], cwd=run_dir, env=env, stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:  # also on KeyboardInterrupt: nothing the run started may outlive it
                kill_run(process, token)
        seconds = time.perf_counter() - start
        if timed_out:
            with open(log_path, "a") as log:
                log.write(f"\n[runner] killed at the hard timeout of {timeout:.0f} s\n")
        expected = workspace.frozen_hashes()
        changed = [path for path in FROZEN if _sha256(run_dir / path) != expected[path]]
        text = log_path.read_text(errors="replace")
        head, tail = read_head_tail(log_path)
        shutil.rmtree(run_dir, ignore_errors=True)
        return RunResult(returncode=process.returncode, timed_out=timed_out, log_path=log_path,
                         verdict=classify(process.returncode, timed_out, text, changed), seconds=seconds,
                         head=head, tail=tail, frozen_changed=changed, model_config=parse_model_config(head))


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
