"""Running train.py as an untrusted process: its own session, an allowlisted environment, a hard
timeout that kills everything it started, and (where the OS allows) no network and read-only
frozen files and data.

Used by the agent's LocalRunner and by the trainer-side spool worker alike.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "VIRTUAL_ENV",
                 "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "NVIDIA_VISIBLE_DEVICES",
                 "HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                 "TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE",
                 "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF", "AUTORESEARCH_CACHE")
ENV_PREFIXES = ("LC_",)
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.IGNORECASE)
RUN_TOKEN_VAR = "AUTORESEARCH_RUN_TOKEN"


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


@functools.cache
def isolation_available() -> bool:
    """Whether runs can get their own network and mount namespaces here (root with unshare, and mounts allowed)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "-n", "-m", "--", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


def isolated_command(command: list[str], read_only: list[Path], hidden: list[Path] | None = None) -> list[str]:
    """command in new network and mount namespaces: read_only bind-mounted read-only, hidden covered by an
    empty read-only tmpfs, then every capability dropped so that the process cannot undo a mount."""
    mounts = [f'mount --bind "{p}" "{p}" && mount -o remount,bind,ro "{p}"' for p in read_only]
    mounts += [f'mount -t tmpfs -o ro,size=4k tmpfs "{p}"' for p in hidden or []]
    drop = "setpriv --bounding-set=-all --inh-caps=-all -- " if shutil.which("setpriv") else ""
    script = " && ".join([*mounts, f'exec {drop}"$@"'])
    return ["unshare", "-n", "-m", "--", "sh", "-c", script, "sandbox", *command]


@dataclass
class ProcessOutcome:
    returncode: int | None
    timed_out: bool
    seconds: float


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it if the process that started it dies (Linux)."""
    import ctypes
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run_untrusted(command: list[str], cwd: Path, log_path: Path, timeout: float, extra_env: dict[str, str],
                  read_only: list[Path] | None = None, isolate: bool = False, hidden: list[Path] | None = None,
                  pass_fds: tuple[int, ...] = (), on_start=None) -> ProcessOutcome:
    """Runs command with its output streamed to log_path; nothing it starts outlives it (nor its parent).
    With isolate, read_only and hidden are mounted as isolated_command says; pass_fds stay open in it."""
    token = secrets.token_hex(8)
    env = scrubbed_environment({**extra_env, RUN_TOKEN_VAR: token})
    if isolate:
        command = isolated_command(command, read_only or [], hidden)
    start = time.perf_counter()
    timed_out = False
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=pass_fds,
                                   preexec_fn=_die_with_parent if os.name == "posix" else None)
        if on_start is not None:
            on_start(process)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # also on KeyboardInterrupt
            kill_run(process, token)
    if timed_out:
        with open(log_path, "a") as log:
            log.write(f"\n[runner] killed at the hard timeout of {timeout:.0f} s\n")
    return ProcessOutcome(process.returncode, timed_out, time.perf_counter() - start)
