"""What a Ray task does on a cluster's node: the one run path (trainer/runs/training_run.py) on a commit's files
sent with the task, and what comes back to the agent.

Nothing here needs the agent, its workspace or its keys: the caller sends the files and the frozen hashes.
Before a node's first run its track is made ready (prepared from the commit's own track.json source, or
found already prepared in AUTORESEARCH_CACHE, shared or not) and its fingerprint checked against the
commit's. The run's directory, log and sealed weights live in the node's own runs root and are removed
once read: the log (capped) and the weights travel back as bytes, the RunResult as a JSON message.
Functions only: the agent's RayRunner makes them Ray tasks (one GPU each); ray is imported lazily.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from trainer.evaluator.evaluation import EvaluationOutcome
from trainer.files.locks import held
from trainer.prepare import PrepareError, cache_root, track_dir
from trainer.runs.jobs import EvaluationJob
from trainer.runs.run_id import neutral_name
from trainer.runs.run_result import RunResult
from trainer.runs.training_run import RunRequest, evaluate_commit, run_commit
from trainer.sandbox.untrusted import runs_root
from trainer.tracks.spec import TrackSpec

LOG_LIMIT = 8 << 20  # bytes of a log sent back; the run path caps it below this already (4 MiB head + 1 MiB tail)
NONE = "(none)"      # the fingerprint of a track that is not prepared
OWNER = "owner"      # the pid of the worker process whose task a results directory is
RUN_DIR = "run-dir"  # the name, drawn at random, of its run directory (no run can read which run it is from it)
_ready_lock = threading.Lock()
_ready: set[str] = set()  # fingerprints this worker process found ready


class NodePlace(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ip: str
    node_id: str

    @property
    def where(self) -> str:
        return f"ray node {self.ip} ({self.node_id[:8]})"


class NodeRun(BaseModel):
    """A run on a node, as the task sends it back beside the log's and the weights' bytes."""
    model_config = ConfigDict(extra="forbid")
    place: NodePlace
    result: RunResult                # its paths are the node's: the agent points them at its own copies
    log_cut: int = 0                 # bytes of the log not sent back


class NodeEvaluation(EvaluationOutcome):
    place: NodePlace


class TrackUnavailable(Exception):
    """The node cannot have the commit's track: the message names the node, both fingerprints or the problem."""


def here() -> NodePlace:
    import ray
    return NodePlace(ip=ray.util.get_node_ip_address(), node_id=ray.get_runtime_context().get_node_id())


def gpu_env() -> dict[str, str]:
    import ray
    gpus = ray.get_gpu_ids()
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in gpus)} if gpus else {}


def run_on_node(files: Mapping[str, bytes], *, seed: int, timeout: float, frozen_sha256: Mapping[str, str],
                run_id: str) -> tuple[str, bytes, bytes | None]:
    """(NodeRun as JSON, the log's bytes, the sealed weights' bytes or None) of one run of files on this node."""
    place = here()
    kept = private_results(run_id)
    try:
        log_path, weights = kept / "run.log", kept / "weights.pt"
        try:
            ensure_track(files["track.json"], place)
        except TrackUnavailable as err:
            result = RunResult.infra(str(err), log_path, said_by=f"ray node {place.ip}")
        else:
            result = run_commit(RunRequest(files=files, seed=seed, timeout=timeout, frozen_sha256=frozen_sha256,
                                           run_dir=run_dir_of(kept), log_path=log_path,
                                           checkpoint_destination=weights, extra_env=gpu_env()))
        log, cut = capped(log_path)
        sealed = weights.read_bytes() if result.checkpoint is not None and weights.is_file() else None
        return NodeRun(place=place, result=result, log_cut=cut).model_dump_json(), log, sealed
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def evaluate_on_node(files: Mapping[str, bytes], weights: bytes, job: EvaluationJob, run_id: str) -> tuple[str, bytes]:
    """(NodeEvaluation as JSON, the evaluator's log) of trainer/evaluator/evaluate.py on the job's weights, sent as
    bytes, on this node."""
    place = here()
    kept = private_results(run_id)
    try:
        checkpoint, log_path = kept / "weights.pt", kept / "evaluate.log"
        checkpoint.write_bytes(weights)
        try:
            ensure_track(files["track.json"], place)
        except TrackUnavailable as err:
            log_path.write_text(f"[ray node {place.ip}] {err}\n")
            outcome = EvaluationOutcome(problem="see its log")
        else:
            outcome = evaluate_commit(files, job.model_copy(update={"checkpoint": checkpoint}),
                                      run_dir=run_dir_of(kept), log_path=log_path, extra_env=gpu_env(),
                                      python=sys.executable)
        return NodeEvaluation(**dict(outcome), place=place).model_dump_json(), capped(log_path)[0]
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def private_results(run_id: str) -> Path:
    """A fresh directory for one task's log and weights in the node's runs root (which no run sees), owned by
    this worker process; what tasks of dead workers left there (cancelled, their node stopped) goes first."""
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise ValueError(f"a run id must name one directory, got {run_id!r}")
    sweep_abandoned()
    directory = runs_root() / "ray-results" / run_id
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, mode=0o700)
    runs_root().chmod(0o711)
    (directory / RUN_DIR).write_text(neutral_name())  # before its owner: the sweep then always finds both
    (directory / OWNER).write_text(str(os.getpid()))
    return directory


def run_dir_of(kept: Path) -> Path:
    """The run directory of the task whose results directory is kept (ValueError: its name is not one we draw)."""
    name = (kept / RUN_DIR).read_text().strip()
    if not re.fullmatch(r"run-[0-9a-f]{16}", name):
        raise ValueError(f"{kept / RUN_DIR} names no run directory")
    return runs_root() / "ray" / name


def sweep_abandoned() -> None:
    for kept in list((runs_root() / "ray-results").glob("*")):
        try:
            owner = int((kept / OWNER).read_text())
        except (OSError, ValueError):  # being made this moment, or its task died before it said whose it is
            try:
                if time.time() - kept.stat().st_mtime < 60:
                    continue
            except OSError:
                continue
        else:
            if not process_gone(owner):
                continue
        with contextlib.suppress(OSError, ValueError):
            shutil.rmtree(run_dir_of(kept), ignore_errors=True)
        shutil.rmtree(kept, ignore_errors=True)


def process_gone(pid: int) -> bool:
    """Whether a process has exited: not there, or a zombie (dead, not yet reaped by a parent that may never)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    return False


def capped(log_path: Path) -> tuple[bytes, int]:
    with contextlib.suppress(OSError), open(log_path, "rb") as log:
        size = log.seek(0, 2)
        log.seek(0)
        return log.read(LOG_LIMIT), max(0, size - LOG_LIMIT)
    return b"", 0


def ensure_track(track_json: bytes, place: NodePlace) -> None:
    """The commit's track ready on this node with the commit's fingerprint (checked once per worker process),
    prepared first if it is not there (one build at a time per cache), or TrackUnavailable saying why not."""
    try:
        wanted = TrackSpec.parse(track_json, "the commit's track.json")
    except PrepareError as err:
        raise TrackUnavailable(str(err)) from err
    with _ready_lock:
        if wanted.fingerprint in _ready:
            return
        cache = cache_root().expanduser().resolve()
        found = prepared_fingerprint(track_dir(wanted.track, cache))
        if found == NONE:  # another track prepared there is never replaced: other runs may be reading it
            with cache_lock(cache, place):
                found = build_track(wanted, cache, place)
        if found != wanted.fingerprint:
            raise TrackUnavailable(
                f"ray node {place.ip} has track {wanted.track!r} with fingerprint {found[:12]} in {cache}, but the "
                f"commit's track.json has {wanted.fingerprint[:12]}: its numbers would not be comparable. Prepare "
                f"the node from the same source (same Python for stdlib, same files for a folder) or point "
                f"AUTORESEARCH_CACHE on every node at one shared cache")
        _ready.add(wanted.fingerprint)


def prepared_fingerprint(directory: Path) -> str:
    from trainer.tracks.builder import prepared_spec
    spec = prepared_spec(directory)
    return spec.fingerprint if spec is not None else NONE


def build_track(wanted: TrackSpec, cache: Path, place: NodePlace) -> str:
    from trainer.tracks.builder import prepare_track
    found = prepared_fingerprint(track_dir(wanted.track, cache))
    if found != NONE:  # another process of this node built it meanwhile
        return found
    source = wanted.source
    argument = {"climbmix": "climbmix", "stdlib": "stdlib"}.get(source.kind) or getattr(source, "path", "")
    try:
        prepared = prepare_track(wanted.track, argument, getattr(source, "num_shards", None), cache,
                                 show_progress=False)
    except (PrepareError, OSError) as err:
        raise TrackUnavailable(f"ray node {place.ip} cannot prepare track {wanted.track!r} in {cache}: {err}") from err
    return prepared.track.fingerprint


@contextlib.contextmanager
def cache_lock(cache: Path, place: NodePlace):
    with contextlib.ExitStack() as stack:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            stack.enter_context(held(cache / "ray-prepare.lock"))
        except OSError as err:
            raise TrackUnavailable(f"ray node {place.ip} cannot prepare a track in {cache} ({err.strerror or err}):"
                                   " prepare it there, or set AUTORESEARCH_CACHE to a writable directory") from err
        yield


