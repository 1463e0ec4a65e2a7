"""The trusted number: the weights a run sealed, scored by the harness's own evaluator.

train.py prints its own score, and the code that prints it is what the proposer edits. So every
run whose number could keep a commit (a would-be keep, a close call, a simplification, the
baseline, the runs of a noise floor) is scored again by trainer/evaluate.py in a fresh process
from the weights the run sealed (trainer/seal.py: handed over before any validation text reached
the run), with its own implementation of the metric, probing the model for lookahead in every
batch and serving each batch from a fresh process (trainer/model_server.py). That score becomes
the run's val_bpb of record; decisions are taken on it. What the run printed is a consistency
check: a gap wider than the harness's own tolerance (from the device the harness let the run
reach and the evaluator's, never from the run's log) is tamper, as are no sealed weights,
weights changed since the seal, a lookahead, or answers the model's own logits contradict.
A run judged a discard on its printed number is not scored: a fake worse number gains nothing.
"""

from __future__ import annotations

import time

from agent.recording.record import Check, RunEntry, Verification
from agent.running.evaluator import EvaluationFailed
from agent.running.jobs import EvaluationJob
from agent.running.runner import Runner
from agent.workspace import Workspace
from trainer.evaluation import Evaluation
from trainer.hashing import file_sha256
from trainer.run_id import RunKind

# |trusted - printed| allowed, by device. CPU is fp32 and differs only in summation order and the
# printed rounding (measured below 1e-6); CUDA runs bf16 autocast and a compiled model.
AGREEMENT = {"cpu": 1e-5, "cuda": 2e-3}
LOOKAHEAD_LIMIT = 1e-3  # logits are softcapped at 15; a causal model moves them by 0 (CPU) or bf16 noise
# nats per token between what the model server reported and what its own logits give: the same forward
# pass, so only float32 against float64 rounding (audit), or the same batch run twice (repeat)
CONSISTENCY_LIMIT = 1e-3


class Untrusted(Exception):
    """A run's number cannot stand (tamper); the message says why."""


def trusted(run: RunEntry) -> bool:
    """Whether the run's number is the trusted evaluator's (or it has none to score)."""
    return bool(run.trusted) or run.val_bpb is None


def score_runs(workspace: Workspace, runner: Runner, commit: str, runs: list[RunEntry],
               splits: tuple[str, ...] = ("val",)) -> None:
    """Scores every run that has a number but no trusted one (and every run, where splits asks for more than val);
    raises Untrusted at the first that fails."""
    for run in runs:
        if run.val_bpb is not None and (not run.trusted or (len(splits) > 1 and run.holdout_bpb is None)):
            score_run(workspace, runner, commit, run, splits)


def score_run(workspace: Workspace, runner: Runner, commit: str, run: RunEntry,
              splits: tuple[str, ...] = ("val",)) -> None:
    """The run's val_bpb becomes the trusted evaluator's score of its sealed weights (and holdout_bpb, if asked);
    run.check holds what the evaluator found. Raises Untrusted when the number cannot stand."""
    printed = run.printed if run.printed is not None else run.val_bpb
    if not run.checkpoint:
        raise Untrusted(f"the run with seed {run.seed} printed val_bpb {printed} but sealed no weights through "
                        "prepare.evaluate_bpb, so the number cannot have come from the metric")
    checkpoint = workspace.dir / run.checkpoint
    if not checkpoint.is_file() or file_sha256(checkpoint) != run.checkpoint_sha256:
        raise Untrusted(f"the weights the run with seed {run.seed} sealed were changed or removed since")
    if run.run_id is None:
        raise ValueError("only a run of this loop, whose RunId it knows, can be verified")
    job = EvaluationJob(run=run.run_id.then(RunKind.VERIFY), commit=commit, checkpoint=checkpoint, splits=splits,
                        probe=True)
    started = time.monotonic()
    try:
        evaluation = runner.evaluate(workspace, job)
    except EvaluationFailed as err:
        raise Untrusted(f"the run with seed {run.seed} cannot be verified: {err}") from err
    both_cpu = evaluation.device == "cpu" and run.device == "cpu"  # else bf16 somewhere
    tolerance = AGREEMENT["cpu"] if both_cpu else AGREEMENT["cuda"]
    gap = abs(evaluation.val - printed)
    run.check = Check(seed=run.seed, printed=printed, trusted=round(evaluation.val, 6), gap=gap, tolerance=tolerance,
                      lookahead=evaluation.lookahead, probes=evaluation.probes, audit=evaluation.audit,
                      audited_tokens=evaluation.audited_tokens, repeat=evaluation.repeat, device=evaluation.device,
                      seconds=round(time.monotonic() - started, 3))
    if evaluation.holdout is not None:  # a key of the check only where the holdout was scored
        run.check.holdout = round(evaluation.holdout, 6)
    if problem := _problem(evaluation, gap, tolerance, run.seed, printed):
        raise Untrusted(problem)
    run.printed, run.val_bpb, run.trusted = printed, round(evaluation.val, 6), True
    if evaluation.holdout is not None:
        run.holdout_bpb = round(evaluation.holdout, 6)


def _problem(evaluation: Evaluation, gap: float, tolerance: float, seed: int | None, printed: float) -> str | None:
    if problem := model_problem(evaluation):
        return problem
    if gap > tolerance:
        return (f"the run with seed {seed} printed val_bpb {printed:.6f} but its saved weights "
                f"score {evaluation.val:.6f} (allowed difference {tolerance:g})")
    return None


def model_problem(evaluation: Evaluation) -> str | None:
    """Why the model's answers to the evaluator cannot stand (inconsistent, adapting, looking ahead), or None."""
    if evaluation.audit > CONSISTENCY_LIMIT:
        return (f"the model's reported losses are not what its logits give: up to {evaluation.audit:.3g} nats "
                f"apart on {evaluation.audited_tokens} audited tokens (limit {CONSISTENCY_LIMIT})")
    if evaluation.repeat > CONSISTENCY_LIMIT:
        return (f"the model scores the same rows differently after seeing more text: up to "
                f"{evaluation.repeat:.3g} nats apart (limit {CONSISTENCY_LIMIT})")
    if evaluation.lookahead > LOOKAHEAD_LIMIT:
        return (f"the model looks ahead: in copies of scored rows whose tokens after a position were replaced, "
                f"its logits before the first replaced token moved by up to {evaluation.lookahead:.3g} (limit "
                f"{LOOKAHEAD_LIMIT}, {evaluation.probes} probes)")
    return None


def verification_evidence(runs: list[RunEntry]) -> Verification:
    """The checks of every scored run, for the record's evidence."""
    checks = [run.check for run in runs if run.check]
    return Verification(checks=checks, verify_s=round(sum(check.seconds or 0.0 for check in checks), 3))
