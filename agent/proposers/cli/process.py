"""One run of a coding CLI as a child process: its own process group, stdin closed, stdout handed over line by line
as it comes, the end of stderr kept, and the whole group killed at the timeout (and after it exits, so nothing it
started outlives it). A descendant that left the group (setsid) is out of reach of the kill and may hold stdout
open: once the CLI itself has exited, its output is read for at most DRAIN_S more, then the run is over."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainer.sandbox.untrusted import kill_group

STDERR_LINES = 40
DRAIN_S = 5.0  # seconds the output of an exited CLI is still read


@dataclass(frozen=True)
class Finished:
    returncode: int
    timed_out: bool
    stderr_tail: str


def run_streaming(argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float,
                  on_line: Callable[[str], None]) -> Finished:
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    over = threading.Event()  # no line is handed over once the run is over

    def read_stdout() -> None:
        for line in process.stdout:
            if over.is_set():
                return
            on_line(line)

    stderr: deque[str] = deque(maxlen=STDERR_LINES)
    readers = [threading.Thread(target=read_stdout, daemon=True),
               threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True)]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        kill_group(process.pid)
        returncode = process.wait()
        drained_by = time.monotonic() + DRAIN_S
        for reader in readers:
            reader.join(timeout=max(0.0, drained_by - time.monotonic()))
        over.set()
    return Finished(returncode, timed_out, "".join(stderr))


