"""The trainer-side worker: claims jobs from the spool and runs them, sandboxed, in scratch dirs.

    python -m trainer.worker --spool /spool [--workers N | --gpus 0,1,...] [--scratch DIR] [--isolate auto]

Each job's commit is exported from the (read-only) workspace repository into a fresh
scratch directory; train.py runs there with the hard timeout and group kill, an allowlisted
environment and, where the OS allows, no network and read-only frozen files and data. The
log streams into the spool; the result is written atomically. With --gpus, one worker
process per GPU (CUDA_VISIBLE_DEVICES set for each).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import git

from trainer import spool as spoolfs
from trainer.prepare import cache_root, track_dir
from trainer.sandbox import isolation_available, run_untrusted
from trainer.seal import Seal, data_paths, hidden_paths, training_view

TRACKED = ("train.py", "prepare.py", "track.json")
FROZEN = ("prepare.py", "track.json")
CHECKPOINT = "checkpoint.pt"  # written by prepare.evaluate_bpb in the run directory, moved away at the seal
PROJECT_ROOT = Path(__file__).resolve().parents[1]  # where trainer.evaluate is imported from


class Worker:
    def __init__(self, spool: Path, name: str, scratch: Path, isolate: bool, gpu: str | None = None):
        self.spool, self.name, self.scratch, self.isolate, self.gpu = spoolfs.layout(spool), name, scratch, isolate, gpu
        self.job: dict | None = None
        self.process: subprocess.Popen | None = None
        self.stopping = threading.Event()

    def serve(self, once: bool = False, poll: float = 0.3) -> None:
        self.settle_own_claims()
        beating = threading.Thread(target=self.beat, daemon=True)
        beating.start()
        try:
            while not self.stopping.is_set():
                job = spoolfs.claim_next(self.spool, self.name)
                if job is None:
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
            job_id = self.job["id"] if self.job else None
            spoolfs.heartbeat(self.spool, self.name, gpu=self.gpu, job=job_id)
            if job_id and (self.spool / "cancel" / f"{job_id}.json").exists() and self.process is not None:
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.stopping.wait(spoolfs.HEARTBEAT_EVERY)

    def settle_own_claims(self) -> None:
        """Jobs a previous life of this worker claimed and never finished get an infra result."""
        for path in (self.spool / "claimed").glob("*.json"):
            job = spoolfs.read_json(path)
            if job and job.get("worker") == self.name and not (self.spool / "results" / path.name).exists():
                self.finish(job, dict(returncode=None, timed_out=False, seconds=0.0, frozen_changed=[],
                                      infra=f"worker {self.name} restarted during the run"))

    def run(self, job: dict) -> None:
        self.job = job
        run_dir = self.scratch / job["id"]
        shutil.rmtree(run_dir, ignore_errors=True)
        try:
            export(Path(job["workspace"]), job["commit"], run_dir)
        except Exception as err:  # the workspace or commit cannot be read: not the experiment's fault
            self.finish(job, dict(returncode=None, timed_out=False, seconds=0.0, frozen_changed=[],
                                  infra=f"cannot export {job['commit'][:7]} from {job['workspace']}: {err}"))
            return
        cache = cache_root()
        read_only = [run_dir / name for name in FROZEN] + data_paths(cache)
        compile_cache = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or self.scratch / "compile")
        env = {"AUTORESEARCH_CACHE": str(cache)}
        hidden, seal = [], None
        isolate = self.isolate
        if job.get("kind") == "evaluate":  # the trusted evaluator, which sandboxes the model server itself
            isolate = False
            command = [sys.executable, "-m", "trainer.evaluate", job["checkpoint"], "--splits", job["splits"]]
            command += ["--probe"] if job.get("probe") else []
            env["PYTHONPATH"] = str(PROJECT_ROOT)
        else:  # train.py sees the training split only and gets val through the seal
            track = track_dir(json.loads((run_dir / "track.json").read_text())["track"], cache)
            seal = Seal(run_dir, track, CHECKPOINT, self.spool / "checkpoints" / f"{job['id']}.pt")
            command, hidden = [sys.executable, "train.py"], hidden_paths(cache)
            env = {"AUTORESEARCH_SEED": str(job.get("seed", 42)), "AUTORESEARCH_CHECKPOINT": CHECKPOINT,
                   "AUTORESEARCH_CACHE": str(training_view(track, run_dir)), **seal.env()}
        env |= {"TORCHINDUCTOR_CACHE_DIR": str(compile_cache), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
                "TORCHINDUCTOR_AUTOGRAD_CACHE": "1", "TRITON_CACHE_DIR": str(compile_cache / "triton")}
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu

        def started(process):
            self.process = process
            if seal is not None:
                seal.started()

        try:
            outcome = run_untrusted(command, run_dir, self.spool / "logs" / f"{job['id']}.log",
                                    job["timeout"], env, read_only=read_only, isolate=isolate, hidden=hidden,
                                    pass_fds=(seal.child_fd,) if seal else (), on_start=started)
        finally:
            sealed = seal.finish() if seal else None
        changed = [name for name in FROZEN if _sha256(run_dir / name) != job["frozen"][name]]
        shutil.rmtree(run_dir, ignore_errors=True)
        self.finish(job, dict(returncode=outcome.returncode, timed_out=outcome.timed_out, seconds=outcome.seconds,
                              frozen_changed=changed, checkpoint_sha256=sealed.sha256 if sealed else None,
                              seal_refused=sealed.problem if sealed else None))

    def finish(self, job: dict, result: dict) -> None:
        spoolfs.write_json_atomic(self.spool / "results" / f"{job['id']}.json",
                                  dict(result, id=job["id"], worker=self.name, isolated=self.isolate,
                                       finished=time.time()))
        (self.spool / "claimed" / f"{job['id']}.json").unlink(missing_ok=True)
        self.job, self.process = None, None


def export(workspace: Path, commit: str, destination: Path) -> None:
    tree = git.Repo(workspace).commit(commit).tree
    destination.mkdir(parents=True)
    for name in TRACKED:
        (destination / name).write_bytes(tree[name].data_stream.read())


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve training jobs from a spool directory.")
    parser.add_argument("--spool", type=Path, required=True)
    parser.add_argument("--name", default=None, help="worker name (default: host-pid)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (one per GPU with --gpus)")
    parser.add_argument("--gpus", default=None, help="comma-separated GPU ids, one worker each")
    parser.add_argument("--scratch", type=Path, default=None, help="where runs happen (default: a temp dir)")
    parser.add_argument("--isolate", choices=("auto", "on", "off"), default="auto",
                        help="own network and mount namespaces per run (needs root and unshare)")
    parser.add_argument("--once", action="store_true", help="exit when no job is waiting")
    args = parser.parse_args(argv)
    gpus = args.gpus.split(",") if args.gpus else [None] * args.workers
    if len(gpus) > 1:  # one process per GPU, each a single worker
        children = [subprocess.Popen([sys.executable, "-m", "trainer.worker", "--spool", str(args.spool),
                                      "--isolate", args.isolate, *(["--gpus", g] if g else []),
                                      *(["--scratch", str(args.scratch)] if args.scratch else []),
                                      *(["--once"] if args.once else [])]) for g in gpus]
        return max(child.wait() for child in children)
    isolate = isolation_available() if args.isolate == "auto" else args.isolate == "on"
    name = args.name or f"{os.uname().nodename}-{os.getpid()}" + (f"-gpu{gpus[0]}" if gpus[0] else "")
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="autoresearch-runs-"))
    worker = Worker(args.spool, name, scratch, isolate, gpus[0])
    signal.signal(signal.SIGTERM, lambda *_: worker.stopping.set())
    print(f"worker {name}: spool {args.spool}, scratch {scratch}, isolation {'on' if isolate else 'off'}", flush=True)
    worker.serve(once=args.once)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
