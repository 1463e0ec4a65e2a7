"""The spool: plain files through which the agent hands runs to trainer workers (no server).

    <spool>/jobs/<id>.json      a job: workspace, commit, timeout, seed, frozen hashes (atomic write)
    <spool>/claimed/<id>.json   the job, moved here by the one worker that won the rename
    <spool>/results/<id>.json   what happened (atomic write by the worker)
    <spool>/logs/<id>.log       the run's output, streamed
    <spool>/checkpoints/<id>.pt the trained weights, when the run saved them
    <spool>/workers/<w>.json    heartbeats: pid, gpu, the job in hand, time

A job is claimed by os.rename, which only one worker can win. A worker whose heartbeat is
older than DEAD_AFTER seconds is gone: the agent treats its job as an infra failure.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from trainer.atomic import read_json, write_json_atomic

DEAD_AFTER = 20.0       # seconds without a heartbeat
HEARTBEAT_EVERY = 2.0
FOLDERS = ("jobs", "claimed", "results", "logs", "checkpoints", "workers", "cancel")


def layout(spool: Path) -> Path:
    for name in FOLDERS:
        (spool / name).mkdir(parents=True, exist_ok=True)
    return spool


def submit(spool: Path, job: dict) -> None:
    write_json_atomic(layout(spool) / "jobs" / f"{job['id']}.json", job)


def claim_next(spool: Path, worker: str) -> dict | None:
    """The oldest pending job, now ours; None if there is none (or others won every race)."""
    for path in sorted((spool / "jobs").glob("*.json"), key=lambda p: p.stat().st_mtime if p.exists() else 0):
        target = spool / "claimed" / path.name
        try:
            os.rename(path, target)
        except FileNotFoundError:
            continue
        job = read_json(target)
        if job is not None:
            job["worker"] = worker
            write_json_atomic(target, job)
            return job
    return None


def heartbeat(spool: Path, worker: str, **state) -> None:
    write_json_atomic(spool / "workers" / f"{worker}.json", {"worker": worker, "pid": os.getpid(), "time": time.time(),
                                                           **state})


def alive_workers(spool: Path, now: float | None = None, dead_after: float = DEAD_AFTER) -> list[dict]:
    now = now or time.time()
    beats = [read_json(p) for p in (spool / "workers").glob("*.json")]
    return [b for b in beats if b and now - b.get("time", 0) < dead_after and not b.get("stopped")]
