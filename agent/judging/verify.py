"""The trusted number: the weights a run sealed, scored by the harness's own evaluator.

train.py prints its own score, and the code that prints it is what the proposer edits. So every
run whose number could keep a commit (a would-be keep, a close call, a simplification, the
baseline, the runs of a noise floor) is scored again by trainer/evaluator/evaluate.py in a fresh process
from the weights the run sealed (trainer/sandbox/seal.py: handed over before any validation text reached
the run), with its own implementation of the metric, probing the model for lookahead in every
batch and serving each batch from a fresh process (trainer/evaluator/model_server/server.py). That score becomes
the run's val_bpb of record; decisions are taken on it. What the run printed is a consistency
check: a gap wider than the night's tolerance (agent/judging/tolerances.py: measured on its baseline,
for the device the harness let the run reach and the evaluator's, never from the run's log) is tamper,
as are no sealed weights, weights changed since the seal, a lookahead, or answers the model's own
logits contradict.
A run judged a discard on its printed number is not scored: a fake worse number gains nothing.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from agent.judging.tolerances import (
    AUDIT_LIMIT,
    Limits,
    Tolerances,
    beyond_ceiling,
    devices,
    measured,
    night_tolerances,
    store_tolerances,
)
from agent.recording.record import Check, RunEntry, Verification
from agent.running.evaluator import EvaluationFailed
from agent.running.runner import Runner
from agent.workspace import Workspace
from trainer.evaluator.evaluation import Evaluation
from trainer.files.hashing import file_sha256
from trainer.runs.jobs import EvaluationJob
from trainer.runs.run_id import RunKind


class Untrusted(Exception):
    """A run's number cannot stand (tamper); the message says why."""


def trusted(run: RunEntry) -> bool:
    """Whether the run's number is the trusted evaluator's (or it has none to score)."""
    return bool(run.trusted) or run.val_bpb is None


def score_runs(workspace: Workspace, runner: Runner, commit: str, runs: list[RunEntry],
               splits: tuple[str, ...] = ("val",), baseline: bool = False) -> None:
    """Scores every run that has a number but no trusted one (and every run, where splits asks for more than val),
    at once where the runner has the slots; raises Untrusted for the first of them that fails. The baseline's
    first scoring sets the night's tolerances, so it comes before the others."""
    pending = [run for run in runs
               if run.val_bpb is not None and (not run.trusted or (len(splits) > 1 and run.holdout_bpb is None))]
    if baseline and pending:
        score_run(workspace, runner, commit, pending.pop(0), splits, calibrating=True)
    with ThreadPoolExecutor(max_workers=max(1, len(pending)), thread_name_prefix="verify") as pool:
        scorings = [pool.submit(score_run, workspace, runner, commit, run, splits) for run in pending]
    for scoring in scorings:
        scoring.result()


def score_run(workspace: Workspace, runner: Runner, commit: str, run: RunEntry,
              splits: tuple[str, ...] = ("val",), calibrating: bool = False) -> None:
    """The run's val_bpb (and holdout_bpb, if asked) becomes the trusted evaluator's, run.check what it found;
    Untrusted when the number cannot stand. Calibrating (the unmodified baseline's run) sets the tolerances."""
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
    gap = abs(evaluation.val - printed)
    on = devices(evaluation, run.device)
    limits = (calibrated(workspace, evaluation, gap, on, run.seed) if calibrating
              else night_tolerances(workspace, on, evaluation.device)).limits
    run.check = Check(seed=run.seed, printed=printed, trusted=round(evaluation.val, 6), gap=gap,
                      tolerance=limits.agreement,
                      lookahead=evaluation.lookahead, probes=evaluation.probes, audit=evaluation.audit,
                      audited_tokens=evaluation.audited_tokens, repeat=evaluation.repeat, device=evaluation.device,
                      seconds=round(time.monotonic() - started, 3))
    if evaluation.holdout is not None:  # a key of the check only where the holdout was scored
        run.check.holdout = round(evaluation.holdout, 6)
    if problem := model_problem(evaluation, limits):
        raise Untrusted(problem)
    if gap > limits.agreement:
        raise Untrusted(f"the run with seed {run.seed} printed val_bpb {printed:.6f} but its saved weights score "
                        f"{evaluation.val:.6f} (allowed difference {limits.agreement:.3g})")
    run.printed, run.val_bpb, run.trusted = printed, round(evaluation.val, 6), True
    if evaluation.holdout is not None:
        run.holdout_bpb = round(evaluation.holdout, 6)


def calibrated(workspace: Workspace, evaluation: Evaluation, gap: float, on: str, seed: int | None) -> Tolerances:
    """The night's tolerances from the baseline's scoring, stored in run.json; Untrusted (which stops the night)
    when the baseline itself is beyond the ceiling."""
    shown = Limits(agreement=gap, lookahead=evaluation.lookahead, consistency=evaluation.repeat)
    if past := beyond_ceiling(shown):
        raise Untrusted(f"the unmodified baseline's run with seed {seed} disagrees with the trusted evaluator beyond "
                        f"what any night allows: {'; '.join(past)}. On this machine the evaluator cannot tell "
                        "tamper from noise, so no experiment could be judged: check the attention kernel and "
                        "the evaluator's device (docs/tolerances.md)")
    tolerances = measured(shown, on, evaluation.device)
    store_tolerances(workspace, tolerances)
    return tolerances


def model_problem(evaluation: Evaluation, limits: Limits) -> str | None:
    """Why the model's answers to the evaluator cannot stand (inconsistent, adapting, looking ahead), or None."""
    if evaluation.audit > AUDIT_LIMIT:
        return (f"the model's reported losses are not what its logits give: up to {evaluation.audit:.3g} nats "
                f"apart on {evaluation.audited_tokens} audited tokens (limit {AUDIT_LIMIT:g})")
    if evaluation.repeat > limits.consistency:
        return (f"the model scores the same rows differently after seeing more text: up to "
                f"{evaluation.repeat:.3g} nats apart (limit {limits.consistency:.3g})")
    if evaluation.lookahead > limits.lookahead:
        return (f"the model looks ahead: in copies of scored rows whose tokens after a position were replaced, "
                f"its logits before the first replaced token moved by up to {evaluation.lookahead:.3g} (limit "
                f"{limits.lookahead:.3g}, {evaluation.probes} probes)")
    return None


def verification_evidence(runs: list[RunEntry]) -> Verification:
    checks = [run.check for run in runs if run.check]
    return Verification(checks=checks, verify_s=round(sum(check.seconds or 0.0 for check in checks), 3))
