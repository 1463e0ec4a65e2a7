"""Deciding one experiment: crash, or the noise-aware verdict on its runs (agent/judging/noise.py),
and for a would-be keep the trusted re-computation of its numbers (agent/judging/verify.py)."""

from __future__ import annotations

from agent.judging.noise import CRASH, KEEP, Judgement, commit_runs, current_sigma, judge
from agent.judging.verify import verify_runs
from agent.recording.record import ExperimentRecord, RunEntry
from agent.recording.transcript import Transcript
from agent.running.runner import Runner, RunResult
from agent.workspace import Workspace
from trainer.triage import Triage


def decide(result: RunResult, best: ExperimentRecord | None, records: list[ExperimentRecord],
           runs: list[RunEntry], sigmas: float, min_delta: float) -> Judgement:
    """crash, the baseline's keep, or the noise-aware verdict on the runs so far (see agent/judging/noise.py)."""
    verdict = result.verdict
    if verdict.triage != Triage.OK:
        return Judgement(CRASH, f"{verdict.triage.value}: {verdict.reason}")
    measured = [r.val_bpb for r in runs if r.val_bpb is not None]
    if best is None:
        return Judgement(KEEP, f"baseline val_bpb {measured[0]:.6f}")
    return judge(measured, commit_runs(records, best.commit), current_sigma(records), sigmas, min_delta)


# One experiment is one change. Gains in the reference's research logs are fractions of a percent, a few
# percent when a broken setting is fixed; a fall of more than a tenth of val_bpb in one change is far more
# often a broken metric than a better model, so it is trained again from scratch (a new run, a new seed)
# and every run is verified before it can be kept, and the record says so.
IMPLAUSIBLE_FALL = 0.10


def implausible_fall(runs: list[RunEntry], best: ExperimentRecord | None) -> str | None:
    """Why the first run's number is too good to keep on its own, or None."""
    measured = [r.val_bpb for r in runs if r.val_bpb is not None]
    if best is None or not measured or not best.val_bpb:
        return None
    fall = (best.val_bpb - measured[0]) / best.val_bpb
    if fall <= IMPLAUSIBLE_FALL:
        return None
    return (f"val_bpb fell {100 * fall:.1f}% in one experiment ({best.val_bpb:.6f} -> {measured[0]:.6f}), more "
            f"than the {100 * IMPLAUSIBLE_FALL:.0f}% one change plausibly gains")


def verified(workspace: Workspace, runner: Runner, commit: str, runs: list[RunEntry], judgement: Judgement,
             transcript: Transcript) -> Judgement:
    """The keep, once the trusted evaluator reproduced every run's number; else a tamper crash."""
    problem, evidence = verify_runs(workspace, runner, commit, runs)
    transcript.event("verification", passed=problem is None, problem=problem, **evidence)
    if problem is None:
        return Judgement(KEEP, judgement.reason + "; verified from the sealed weights",
                         judgement.evidence.model_copy(update=dict(verification=evidence)))
    return Judgement(CRASH, f"tamper: {problem}", judgement.evidence.model_copy(update=dict(verification=evidence)),
                     triage=Triage.TAMPER.value)
