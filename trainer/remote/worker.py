"""The trainer-side worker: claims jobs from the spool and runs them, sandboxed, in scratch dirs.

    python -m trainer.remote.worker --spool /spool [--workers N | --gpus 0,1,...] [--scratch DIR]

Each job's commit is read from the (read-only) workspace repository and trained in a fresh
scratch directory by the run path (trainer/runs/training_run.py): where the machine allows, as a
stranger that sees neither the spool nor the workspaces (trainer/sandbox/untrusted.py). The log (capped)
streams into the spool; the result is written atomically.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import git

from trainer.remote import spool as spoolfs
from trainer.remote.spool import SpoolJob, SpoolResult
from trainer.runs.jobs import EvaluationJob
from trainer.runs.run_id import neutral_name
from trainer.runs.training_run import TRACKED, RunRequest, evaluate_commit, run_commit
from trainer.sandbox.untrusted import isolation, kill_group


class Worker:
    def __init__(self, spool: Path, name: str, scratch: Path, gpu: str | None = None):
        self.spool, self.name, self.scratch, self.gpu = spoolfs.layout(spool), name, scratch, gpu
        self.job: SpoolJob | None = None
        self.process: subprocess.Popen | None = None
        self.stopping = threading.Event()

    def serve(self, once: bool = False, poll: float = 0.3) -> None:
        self.settle_own_claims()
        threading.Thread(target=self.beat, daemon=True).start()
        try:
            while not self.stopping.is_set():
                if (job := spoolfs.claim_next(self.spool, self.name)) is None:
                    if once:
                        return
                    time.sleep(poll)
                    continue
                self.run(job)
        finally:
            self.stopping.set()
            spoolfs.heartbeat(self.spool, self.name, gpu=self.gpu, job=None, stopped=True)

    def beat(self) -> None:
        while not self.stopping.is_set():
            job_id = self.job.id if self.job else None
            spoolfs.heartbeat(self.spool, self.name, gpu=self.gpu, job=job_id)
            if job_id and (self.spool / "cancel" / f"{job_id}.json").exists() and self.process is not None:
                kill_group(self.process.pid)
            self.stopping.wait(spoolfs.HEARTBEAT_EVERY)

    def settle_own_claims(self) -> None:
        """Jobs a previous life of this worker claimed and never finished get an infra result."""
        for path in (self.spool / "claimed").glob("*.json"):
            try:
                job = spoolfs.read_message(path, SpoolJob)
            except spoolfs.SpoolMessageError as err:
                spoolfs.refuse(self.spool, path, self.name, str(err))
                continue
            if job and job.worker == self.name and not (self.spool / "results" / path.name).exists():
                self.finish(job, SpoolResult(id=job.id, worker=self.name,
                                             infra=f"worker {self.name} restarted during the run"))

    def run(self, envelope: SpoolJob) -> None:
        self.job, job = envelope, envelope.job
        print(f"worker {self.name}: {job.kind} {envelope.id}", flush=True)
        try:
            files = exported(envelope.workspace, job.commit)
        except Exception as err:  # the workspace or commit cannot be read: not the experiment's fault
            self.finish(envelope, SpoolResult(id=envelope.id, worker=self.name, infra=f"cannot export "
                                              f"{job.commit[:7]} from {envelope.workspace}: {err}"))
            return
        result = SpoolResult(id=envelope.id, worker=self.name)
        run_dir, log_path = self.scratch / neutral_name(), self.spool / "logs" / f"{envelope.id}.log"
        try:
            if isinstance(job, EvaluationJob):
                result.evaluation = evaluate_commit(files, job, run_dir=run_dir, log_path=log_path,
                                                    extra_env=self.device_env(), on_start=self.started)
            else:
                result.run = run_commit(RunRequest(
                    files=files, seed=job.seed, timeout=job.timeout, frozen_sha256=envelope.frozen,
                    run_dir=run_dir, log_path=log_path,
                    checkpoint_destination=self.spool / "checkpoints" / f"{envelope.id}.pt",
                    hidden=(self.spool, envelope.workspace), extra_env=self.device_env()), on_start=self.started)
        except Exception as err:  # this machine failed, not the experiment: the agent's infra rule decides
            traceback.print_exc()
            result = SpoolResult(id=envelope.id, worker=self.name,
                                 infra=f"worker {self.name} could not run the job: {type(err).__name__}: {err}")
        self.finish(envelope, result)

    def started(self, process: subprocess.Popen) -> None:
        self.process = process

    def device_env(self) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": self.gpu} if self.gpu is not None else {}

    def finish(self, job: SpoolJob, result: SpoolResult) -> None:
        spoolfs.write_message(self.spool / "results" / f"{job.id}.json", result)
        (self.spool / "claimed" / f"{job.id}.json").unlink(missing_ok=True)
        self.job, self.process = None, None


def exported(workspace: Path, commit: str) -> dict[str, bytes]:
    tree = git.Repo(workspace).commit(commit).tree
    return {name: tree[name].data_stream.read() for name in TRACKED}


def share_spool_folders(spool: Path) -> None:
    """A worker running as root (to sandbox runs) leaves the spool's folders to the spool's owner, who
    writes jobs there: a folder root made first would lock the agent out."""
    if os.geteuid() != 0:
        return
    owner = spool.stat()
    for folder in (spool / name for name in spoolfs.FOLDERS):
        if folder.stat().st_uid != owner.st_uid:
            os.chown(folder, owner.st_uid, owner.st_gid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve training jobs from a spool directory.")
    parser.add_argument("--spool", type=Path, required=True)
    parser.add_argument("--name", default=None, help="worker name (default: host-pid)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (one per GPU with --gpus)")
    parser.add_argument("--gpus", default=None, help="comma-separated GPU ids, one worker each")
    parser.add_argument("--scratch", type=Path, default=None, help="where runs happen (default: a temp dir)")
    parser.add_argument("--once", action="store_true", help="exit when no job is waiting")
    args = parser.parse_args(argv)
    gpus = args.gpus.split(",") if args.gpus else [None] * args.workers
    if len(gpus) > 1:  # one process per GPU, each a single worker
        children = [subprocess.Popen([sys.executable, "-m", "trainer.remote.worker", "--spool", str(args.spool),
                                      *(["--gpus", g] if g else []),
                                      *(["--scratch", str(args.scratch)] if args.scratch else []),
                                      *(["--once"] if args.once else [])]) for g in gpus]
        return max(child.wait() for child in children)
    name = args.name or f"{os.uname().nodename}-{os.getpid()}" + (f"-gpu{gpus[0]}" if gpus[0] else "")
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="autoresearch-runs-"))
    worker = Worker(args.spool, name, scratch, gpus[0])
    share_spool_folders(args.spool)
    signal.signal(signal.SIGTERM, lambda *_: worker.stopping.set())
    print(f"worker {name}: spool {args.spool}, scratch {scratch}; {isolation().note}", flush=True)
    worker.serve(once=args.once)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
