"""One run of a coding CLI as a child process: its own process group, stdin closed, stdout handed over line by line
as it comes, the end of stderr kept, and the whole group killed at the timeout (and after it exits, so nothing it
started outlives it)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

STDERR_LINES = 40


@dataclass(frozen=True)
class Finished:
    returncode: int
    timed_out: bool
    stderr_tail: str


def run_streaming(argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float,
                  on_line: Callable[[str], None]) -> Finished:
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        _kill_group(process.pid)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    stderr: deque[str] = deque(maxlen=STDERR_LINES)
    reader = threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True)
    timer.start()
    reader.start()
    try:
        for line in process.stdout:
            on_line(line)
        returncode = process.wait()
    finally:
        timer.cancel()
        _kill_group(process.pid)
        if process.poll() is None:
            process.wait()
        reader.join(timeout=5)
    return Finished(returncode, expired.is_set(), "".join(stderr))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
