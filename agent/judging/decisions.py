"""Deciding one experiment: crash, or the noise-aware verdict on its runs (agent/judging/noise.py) taken on
the trusted numbers (agent/judging/verify.py) against the best's standing, and the rules for a fall too large for
one change."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from agent.judging.keep_rule import KeepRule
from agent.judging.noise import CRASH, KEEP, Judgement, judge
from agent.judging.significance import standard_error
from agent.judging.verify import verification_evidence
from agent.recording.history import History
from agent.recording.record import ExperimentRecord, RunEntry
from agent.running.runner import RunResult
from trainer.runs.triage import Triage


@dataclass(frozen=True)
class Standing:
    """The best as one decision sees it, computed once per decision."""
    best: ExperimentRecord | None   # what the candidate is judged against (None: it is the baseline)
    best_runs: list[float]          # every run of the best's commit, its noise and control runs included
    sigma: float | None             # of the latest noise floor
    best_ever: float | None         # the lowest mean any best commit reached
    sigma_df: int | None = None     # its degrees of freedom: the floor's runs - 1

    @classmethod
    def of(cls, history: History, best: ExperimentRecord | None) -> Standing:
        return cls(best=best, best_runs=history.runs_of(best.commit) if best else [], sigma=history.sigma(),
                   best_ever=history.best_ever_mean(), sigma_df=history.sigma_df())


def decide(result: RunResult, standing: Standing, runs: list[RunEntry], rule: KeepRule) -> Judgement:
    verdict = result.verdict
    if verdict.triage != Triage.OK:
        return Judgement(CRASH, f"{verdict.triage.value}: {verdict.reason}")
    measured = [r.val_bpb for r in runs if r.val_bpb is not None]
    if standing.best is None:
        return Judgement(KEEP, f"baseline val_bpb {measured[0]:.6f}")
    return judge(measured, standing.best_runs, standing.sigma, rule.keep_sigmas, rule.min_delta, standing.sigma_df)


def tamper(judgement: Judgement, problem: str, runs: list[RunEntry]) -> Judgement:
    """The crash a run whose number cannot stand turns the experiment into."""
    evidence = judgement.evidence.model_copy(update=dict(verification=verification_evidence(runs)))
    return Judgement(CRASH, f"tamper: {problem}", evidence, triage=Triage.TAMPER.value)


# One experiment is one change. Gains in the reference's research logs are fractions of a percent, a few
# percent when a broken setting is fixed; a fall of more than a tenth of val_bpb is far more often a broken
# metric than a better model, so it is trained again from scratch (a new run, a new seed), every run is scored
# by the trusted evaluator, and the holdout split must show the fall too. The fall is counted from the last best
# the holdout split checked (the baseline at first), not from the best: keeps that each fall a little under the
# line meet the holdout split once they add up past it.
IMPLAUSIBLE_FALL = 0.10
# A model that got better gets better on text no decision read: its holdout gain is of the order of its val
# gain (the demo keeps 55% of it, BENCHMARKS.md "The demo"). A model that learnt val shows the val gain alone.
HOLDOUT_SHARE = 0.5


def implausible_fall(runs: list[RunEntry], anchor: ExperimentRecord | None) -> str | None:
    """Why a run's number is too good to keep without the holdout split (its lowest: a train.py may fall on one
    seed only), measured from anchor (History.holdout_anchor), or None."""
    measured = [r.val_bpb for r in runs if r.val_bpb is not None]
    if anchor is None or not measured or not anchor.val_bpb:
        return None
    lowest = min(measured)
    if (fall := (anchor.val_bpb - lowest) / anchor.val_bpb) <= IMPLAUSIBLE_FALL:
        return None
    since = "the baseline" if anchor.id == "0000" else f"{anchor.id}, the last best the holdout split checked"
    return (f"val_bpb fell {100 * fall:.1f}% since {since} ({anchor.val_bpb:.6f} -> {lowest:.6f}), more than the "
            f"{100 * IMPLAUSIBLE_FALL:.0f}% the holdout split must confirm")


def holdout_disagrees(runs: list[RunEntry], best_val: float, best_holdout: float) -> str | None:
    """Why the candidate's val fall is not a better model (the holdout split does not show it), or None."""
    if not (scored := [r for r in runs if r.trusted and r.holdout_bpb is not None]):
        return "no run of it was scored on the holdout split"
    val_gain = best_val - statistics.fmean(r.val_bpb for r in scored)
    holdout_gain = best_holdout - statistics.fmean(r.holdout_bpb for r in scored)
    if holdout_gain >= HOLDOUT_SHARE * val_gain:
        return None
    return (f"val_bpb fell {val_gain:.6f} but the holdout split only {holdout_gain:.6f} (a better model keeps at "
            f"least {100 * HOLDOUT_SHARE:.0f}% of its val gain there): a val fall the holdout does not show is "
            "a model that learnt val, not a better one")


def step_disagrees(runs: list[RunEntry], best_id: str, best_val: float, best_holdout: float,
                   sigma: float | None) -> str | None:
    """Why the candidate's own step from the best is a val fall the holdout split clearly does not show, or None:
    its holdout gain falls short of HOLDOUT_SHARE of its val gain by more than two standard errors (one set of
    weights against the mean of the candidate's), so an honest step is not refused for the noise."""
    if not (scored := [r for r in runs if r.trusted and r.holdout_bpb is not None]) or not sigma:
        return None
    val_gain = best_val - statistics.fmean(r.val_bpb for r in scored)
    holdout_gain = best_holdout - statistics.fmean(r.holdout_bpb for r in scored)
    margin = 2 * standard_error(sigma, 1, len(scored))
    if holdout_gain >= HOLDOUT_SHARE * val_gain - margin:
        return None
    return (f"its own step from {best_id} fell {val_gain:.6f} on val but {holdout_gain:.6f} on holdout, short of "
            f"{100 * HOLDOUT_SHARE:.0f}% of it by more than two standard errors ({margin:.6f}): the keeps before it "
            "carried the fall since the last checked best; this step learnt val")
