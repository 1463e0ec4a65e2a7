"""An exclusive flock on a file for a block: one holder at a time across processes."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def held(path: Path, wait: bool = True) -> Iterator[IO[str]]:
    """The lock file (created if missing, open for reading and appending) while the lock is held; without wait,
    BlockingIOError at once when another process holds it."""
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
