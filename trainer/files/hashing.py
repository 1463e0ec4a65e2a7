"""sha256 of files: what the seal, the verifier, track preparation and the run path compare."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

BLOCK = 1 << 22


def file_sha256(path: Path) -> str:
    """The sha256 of a file the caller trusts to be a regular file (its own downloads, sealed weights)."""
    with open(path, "rb") as f:
        return _sha256(f)


def _sha256(handle) -> str:
    digest = hashlib.sha256()
    while block := handle.read(BLOCK):
        digest.update(block)
    return digest.hexdigest()


def regular_file_sha256(path: Path, limit: int = 1 << 30) -> str | None:
    """The sha256 of a regular file no larger than limit, without following a symlink or blocking on a FIFO
    (a run may leave either where a file is expected); None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        return _sha256(handle) if stat.S_ISREG(info.st_mode) and info.st_size <= limit else None

