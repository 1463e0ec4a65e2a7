"""The spool: plain files through which the agent hands runs to trainer workers (no server).

    <spool>/jobs/<id>.json      a job in its envelope: workspace, frozen hashes (atomic write)
    <spool>/claimed/<id>.json   the job, moved here by the one worker that won the rename
    <spool>/results/<id>.json   what happened (atomic write by the worker)
    <spool>/logs/<id>.log       the run's output, streamed
    <spool>/checkpoints/<id>.pt the trained weights, when the run saved them
    <spool>/workers/<w>.json    heartbeats: pid, gpu, the job in hand, time
    <spool>/cancel/<id>.json    a job the agent withdrew while it ran: its worker kills the run

A job is claimed by os.rename, which only one worker can win. A worker whose heartbeat is
older than DEAD_AFTER seconds is gone: the agent treats its job as an infra failure.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainer.evaluator.evaluation import EvaluationOutcome
from trainer.files.atomic import write_json_atomic
from trainer.runs.jobs import AnyJob, EvaluationJob, Job
from trainer.runs.run_result import RunResult

DEAD_AFTER = 20.0       # seconds without a heartbeat
HEARTBEAT_EVERY = 2.0
FOLDERS = ("jobs", "claimed", "results", "logs", "checkpoints", "workers", "cancel")
JobId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")]


class SpoolMessageError(Exception):
    """A spool file that is not the message it should be; the message names the file and what is wrong."""


class SpoolJob(BaseModel):
    """The envelope a job travels in: which workspace's repository holds its commit, the frozen files' hashes its
    run is checked against, and the worker that claimed it."""
    model_config = ConfigDict(extra="forbid")
    id: JobId
    workspace: Path
    frozen: dict[str, str]                  # sha256 of each frozen file at the workspace's first commit
    job: AnyJob
    created: float = Field(default_factory=time.time)
    worker: str | None = None               # set by the worker that claimed it

    @field_validator("job")
    @classmethod
    def _a_job_a_worker_can_take(cls, job: Job | EvaluationJob) -> Job | EvaluationJob:
        if not re.fullmatch(r"[0-9a-f]{40}", job.commit) or not job.timeout > 0:
            raise ValueError(f"a spool job names a full commit hash and a timeout above 0, not {job.commit!r} and "
                             f"{job.timeout!r}")
        return job


class SpoolResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: JobId
    worker: str
    finished: float = Field(default_factory=time.time)
    run: RunResult | None = None
    evaluation: EvaluationOutcome | None = None
    infra: str | None = None


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    worker: str
    pid: int
    time: float
    gpu: str | None = None
    job: str | None = None
    stopped: bool = False


def read_message(path: Path, kind: type[BaseModel]):
    """The message in path, or None while there is none; SpoolMessageError if it holds something else (every
    writer renames a whole file into place, so a file is never seen half-written)."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return kind.model_validate_json(text)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the file'}: {e['msg']}" for e in err.errors()[:5])
        raise SpoolMessageError(f"{path} is not a {kind.__name__} ({problems}): written by another version of "
                                "autoresearch, or by hand? Run agent and workers from the same version") from None


def write_message(path: Path, message: BaseModel) -> None:
    write_json_atomic(path, message.model_dump(mode="json"))


def layout(spool: Path) -> Path:
    for name in FOLDERS:
        (spool / name).mkdir(parents=True, exist_ok=True)
    return spool


def submit(spool: Path, job: SpoolJob) -> None:
    write_message(layout(spool) / "jobs" / f"{job.id}.json", job)


def claim_next(spool: Path, worker: str) -> SpoolJob | None:
    """The oldest pending job, now ours; None if there is none (or others won every race). A job file that
    is not a SpoolJob gets an infra result saying so, for whoever waits on it."""
    for path in sorted((spool / "jobs").glob("*.json"), key=lambda p: p.stat().st_mtime if p.exists() else 0):
        target = spool / "claimed" / path.name
        try:
            os.rename(path, target)
        except FileNotFoundError:
            continue
        try:
            job = read_message(target, SpoolJob)
        except SpoolMessageError as err:
            refuse(spool, target, worker, str(err))
            continue
        if job is not None:
            job.worker = worker
            write_message(target, job)
            return job
    return None


def refuse(spool: Path, claimed: Path, worker: str, problem: str) -> None:
    job_id = claimed.stem
    with contextlib.suppress(ValidationError):  # a name no agent submits: no one waits on it
        write_message(spool / "results" / f"{job_id}.json", SpoolResult(id=job_id, worker=worker, infra=problem))
    claimed.unlink(missing_ok=True)


def heartbeat(spool: Path, worker: str, **state) -> None:
    write_message(spool / "workers" / f"{worker}.json", Heartbeat(worker=worker, pid=os.getpid(), time=time.time(),
                                                                 **state))


def alive_workers(spool: Path, now: float | None = None, dead_after: float = DEAD_AFTER) -> list[Heartbeat]:
    now = now or time.time()
    beats = []
    for path in (spool / "workers").glob("*.json"):
        with contextlib.suppress(SpoolMessageError):
            beats.append(read_message(path, Heartbeat))
    return [b for b in beats if b and now - b.time < dead_after and not b.stopped]
