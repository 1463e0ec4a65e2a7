"""The one run path: a commit's files in, its typed RunResult out, for every runner (the agent's
LocalRunner, the spool's worker, a task on a cluster).

The commit's files are written into a fresh private directory outside any workspace, with a data
view holding the track's training split only; train.py runs there as a stranger where the
machine allows (trainer/sandbox/untrusted.py) with an environment built from an allowlist, torch.compile's
caches of its own (in the run directory: nothing one run writes is read by another), limits on
tasks, memory and disk, a hard timeout, val only through the seal (trainer/sandbox/seal.py), and an end
shortly after its evaluation was handed over.
Afterwards its frozen files are hashed against what they must be, without following whatever the
run left in their place, and its log is classified (trainer/runs/triage.py). The directory is removed;
the sealed weights stay where the seal moved them. The log is written while the run lives, so a
caller can follow it at log_path.

evaluate_commit runs the trusted evaluator (trainer/evaluator/evaluate.py) on a commit's saved weights the same
way for every runner. Nothing here needs the workspace, its repository or the agent: the caller passes the files.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from trainer.evaluator.evaluation import RESULT_FD_FLAG, EvaluationOutcome, read_result
from trainer.files.hashing import regular_file_sha256
from trainer.prepare import PrepareError, cache_root, track_dir
from trainer.runs.jobs import EvaluationJob
from trainer.runs.run_result import RunResult
from trainer.sandbox.limits import RunLimits, free_bytes, gpu_in_reach
from trainer.sandbox.seal import OPENED_DIR, Seal, data_paths, hidden_paths, training_view
from trainer.sandbox.untrusted import View, private_directory, run_untrusted, runs_root
from trainer.sandbox.view import PROJECT_ROOT
from trainer.tracks.hardware import this_machine
from trainer.tracks.kernel_cache import kernel_caches
from trainer.tracks.spec import TrackConstants, TrackSpec

TRACKED = ("train.py", "prepare.py", "track.json")  # a workspace commit's whole tree
FROZEN = ("prepare.py", "track.json")               # never changed after the workspace's first commit
CHECKPOINT = "checkpoint.pt"  # prepare.evaluate_bpb saves the weights here, in the run directory, before the seal


FULL_BYTES = 64 << 20  # free space below which a filesystem counts as full
COMPILE_CACHE = "compile"  # in the run directory: torch.compile's caches, the run's own, gone with it


@dataclass(frozen=True)
class RunRequest:
    """One run of a commit on this machine."""
    files: Mapping[str, bytes]           # name -> content, every name of TRACKED
    seed: int                            # reaches train.py as AUTORESEARCH_SEED
    timeout: float
    frozen_sha256: Mapping[str, str]     # what each FROZEN file must hash to (the workspace's first commit)
    run_dir: Path
    log_path: Path
    checkpoint_destination: Path         # where the seal hands the weights over
    hidden: tuple[Path, ...] = ()        # what the run must not see beyond the defaults (the workspaces, the spool)
    extra_env: Mapping[str, str] = field(default_factory=dict)  # added to its environment (CUDA_VISIBLE_DEVICES)
    python: str = sys.executable
    limits: RunLimits | None = None      # what it may consume (RunLimits.for_machine() when not given)


def run_commit(request: RunRequest, on_start: Callable | None = None) -> RunResult:
    """Runs `python train.py` on the request's files in its run directory; on_start gets the process."""
    files, run_dir, log_path = request.files, request.run_dir, request.log_path
    missing = ([name for name in TRACKED if name not in files]
               + [name for name in FROZEN if name not in request.frozen_sha256])
    if missing:
        raise ValueError(f"a run needs the commit's {', '.join(TRACKED)} and the hashes of {', '.join(FROZEN)}; "
                         f"missing: {', '.join(missing)}")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        spec = TrackSpec.parse(files["track.json"], "the commit's track.json")
        track = track_dir(spec.track)
        prepared = TrackSpec.read(track / "track.json")  # what the run's prepare.py reads, and its seal holds it to
    except PrepareError as err:
        return RunResult.infra(str(err), log_path)
    if prepared is None:
        return RunResult.infra(f"track {spec.track} is not prepared in {track.parent}: run `autoresearch prepare "
                               f"--track {spec.track}`", log_path)
    private_directory(run_dir)
    for name in TRACKED:
        (run_dir / name).write_bytes(files[name])
    (run_dir / OPENED_DIR).mkdir()  # the seal's, made before the run can put something in its place
    compile_cache = run_dir / COMPILE_CACHE  # no run reads what another wrote: nothing of a run outlives it
    compile_cache.mkdir(mode=0o1777)
    compile_cache.chmod(0o1777)
    seal = Seal(run_dir, track, prepared.constants, CHECKPOINT, request.checkpoint_destination)
    kernels, kernel_env = kernel_caches()
    env = {"AUTORESEARCH_SEED": str(request.seed), "AUTORESEARCH_CACHE": str(training_view(track, run_dir)),
           "AUTORESEARCH_CHECKPOINT": CHECKPOINT, **kernel_env, **seal.env(),
           "TORCHINDUCTOR_CACHE_DIR": str(compile_cache), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
           "TORCHINDUCTOR_AUTOGRAD_CACHE": "1", "TRITON_CACHE_DIR": str(compile_cache / "triton"),
           **threads_env(spec.constants, gpu_in_reach()), **request.extra_env}
    cache = cache_root()
    view = View(read_only=[*data_paths(cache), *kernels],
                hidden=[runs_root(), run_dir.parent, *request.hidden, *hidden_paths(cache)])
    limits = request.limits or RunLimits.for_machine()
    device = "cuda" if gpu_in_reach() else "cpu"  # every GPU device is in its view; the variable only asks
    if device == "cuda":
        limits = replace(limits, memory_bytes=None)

    def started(process) -> None:
        seal.started(process.pid)
        if on_start is not None:
            on_start(process)

    try:
        outcome = run_untrusted([request.python, "train.py"], run_dir, log_path, request.timeout, env, view=view,
                                pass_fds=(seal.child_fd,), on_start=started, limits=limits, ending=seal.ending,
                                on_log=lambda log: setattr(seal, "at_request", log.mark_seal))
    finally:
        sealed = seal.finish()
    changed = [name for name in FROZEN if regular_file_sha256(run_dir / name) != request.frozen_sha256[name]]
    # A run's own writes are held well above DISK_RESERVE (trainer/sandbox/limits.py): a filesystem full at its end was
    # filled by something else, and a run that failed then failed for that.
    full = outcome.returncode != 0 and free_bytes(run_dir) < FULL_BYTES
    shutil.rmtree(run_dir, ignore_errors=True)
    return RunResult.observed(log_path, outcome.returncode, outcome.timed_out, outcome.seconds, changed,
                              sealed.problem, limit_hit=outcome.limit_hit,
                              harness_failed=sealed.harness_failed or outcome.disk_full or (
                                  f"No space left on device: the filesystem holding {run_dir.parent} was full when "
                                  "the run ended" if full else None),
                              checkpoint=sealed.checkpoint, checkpoint_sha256=sealed.sha256,
                              seal_seconds=sealed.seconds, cpu_seconds=sealed.cpu_seconds,
                              trained_tokens=sealed.trained_tokens, flops=sealed.flops,
                              isolated=outcome.isolated, limits=outcome.limits,
                              log_shown_bytes=outcome.log_shown_bytes,
                              ended=outcome.ended.why if outcome.ended else None, device=device,
                              hardware=this_machine())


def evaluate_commit(files: Mapping[str, bytes], job: EvaluationJob, *, run_dir: Path, log_path: Path,
                    extra_env: Mapping[str, str] | None = None, python: str = sys.executable,
                    on_start: Callable | None = None) -> EvaluationOutcome:
    """trainer/evaluator/evaluate.py on the job's saved weights, in a fresh run_dir holding the commit's files (it
    imports their frozen prepare.py, never their train.py, and sandboxes the model server that does), its output in
    log_path and its Evaluation handed back through a pipe."""
    private_directory(run_dir)
    for name in TRACKED:
        (run_dir / name).write_bytes(files[name])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result_read, result_write = os.pipe()
    command = [python, "-m", "trainer.evaluator.evaluate", str(job.checkpoint), "--splits", ",".join(job.splits),
               RESULT_FD_FLAG, str(result_write), *(["--probe"] if job.probe else []),
               *(["--batch-rows", str(job.batch_rows)] if job.batch_rows is not None else [])]
    # torch's threads as the track's runs have them: a scoring beside runs (or beside another scoring) that took
    # every core would spin against them at its barriers, slowing both several times over
    try:
        threads = threads_env(TrackSpec.parse(files["track.json"], "the commit's track.json").constants,
                              gpu_in_reach())
    except PrepareError:
        threads = {}
    env = {**threads, **(extra_env or {}), "PYTHONPATH": str(PROJECT_ROOT), "AUTORESEARCH_CACHE": str(cache_root())}
    try:
        process = run_untrusted(command, run_dir, log_path, job.timeout, env, pass_fds=(result_write,),
                                on_start=on_start)
    finally:
        os.close(result_write)
        shutil.rmtree(run_dir, ignore_errors=True)
        evaluation, problem = read_result(result_read)
    if process.timed_out or process.returncode != 0:
        evaluation, problem = None, "timed out" if process.timed_out else "see its log"
    return EvaluationOutcome(returncode=process.returncode, timed_out=process.timed_out, seconds=process.seconds,
                             evaluation=evaluation, problem=problem)


def threads_env(constants: TrackConstants, gpu: bool = False) -> dict[str, str]:
    """torch's threads for a run of the track: its `threads`, else one where the harness reads the run's CPU
    seconds (a CPU-clock track; a step or FLOPs track without a GPU, which agent/judging/compute.py holds to the
    baseline's CPU seconds). A thread waiting at a barrier for a sibling whose core other work took is charged the
    wait (spinning) or wakes late (sleeping): a step's CPU seconds would depend on the load. A train.py may set
    more threads: on a FLOPs budget that only changes how soon it is done, and what it spins counts against it."""
    counted = bool(constants.step_budget or constants.flops_budget) and not gpu
    threads = constants.threads or (1 if constants.budget_clock == "cpu" or counted else None)
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)} if threads else {}
