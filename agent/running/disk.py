"""Room on disk. The free space is checked before every experiment, so that a run never starts
where its weights or the ledger could not be written; a full disk met anyway (another program
filled it) stops the loop with a message saying so, never a traceback (agent/loop.py)."""

from __future__ import annotations

import errno
from pathlib import Path

from trainer.sandbox.limits import DISK_RESERVE, free_bytes

MIN_FREE_BYTES = DISK_RESERVE + (256 << 20)  # the agent's reserve, and room for one more run of a small track


def short_of_room(paths: list[Path]) -> str | None:
    """Why an experiment may not start here now (too little free space where these paths live), or None."""
    for path in paths:
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is not None and (free := free_bytes(existing)) < MIN_FREE_BYTES:
            return (f"only {free / 2**20:.0f} MiB are free on the filesystem holding {path}; the loop needs "
                    f"{MIN_FREE_BYTES / 2**20:.0f} MiB there to start an experiment (its run, its log, its sealed "
                    "weights, the ledger). Free some space and run again: the loop resumes from the best commit")
    return None


def disk_full(err: BaseException) -> str | None:
    """A message for the user when err, or what it came from, is a full disk or quota; else None."""
    seen: BaseException | None = err
    while seen is not None:
        full = isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT)
        if full or any(words in str(seen) for words in ("No space left on device", "Disk quota exceeded")):
            where = f" ({seen.filename})" if isinstance(seen, OSError) and seen.filename else ""
            return (f"the disk is full{where}: {str(seen).strip()[:300]}. Nothing recorded was lost (the ledger is "
                    "appended whole lines at a time; an experiment that was running is recorded as interrupted "
                    "when the tag is resumed). Free some space and run again: the loop resumes from the best commit")
        seen = seen.__cause__ or seen.__context__
    return None
