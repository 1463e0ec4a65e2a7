"""Simplification can win: a change that removes net lines of code from train.py and whose result is
not worse than the best's by more than one standard error of the difference is kept as `simplify`.

A run of such keeps must not walk the best upwards: the drift guard refuses a simplification whose
mean would end more than one sigma above the lowest mean any best ever reached. Without a noise floor
the standard error is unknown, so the candidate must be at least as good as the best, and the guard
allows no drift at all.
"""

from __future__ import annotations

import statistics

from agent.judging.decisions import Standing
from agent.judging.noise import DISCARD, KEEP, Judgement
from agent.judging.significance import standard_error
from agent.recording.record import SIMPLIFY, RunEntry, SimplifyEvidence

RULE = "simplify: fewer lines of code, mean within one standard error of the best's, within one sigma of the " \
       "best mean ever reached"


def code_lines(source: str) -> int:
    """Lines that hold code: not blank and not only a comment."""
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


def weigh(candidate: list[float], best: list[float], best_ever: float, sigma: float | None,
          lines_removed: int) -> SimplifyEvidence:
    candidate_mean, best_mean = statistics.fmean(candidate), statistics.fmean(best)
    error = standard_error(sigma, len(candidate), len(best)) if sigma else 0.0
    ceiling = best_ever + (sigma or 0.0)
    numbers = dict(lines_removed=lines_removed, candidate_mean=round(candidate_mean, 6),
                   best_mean=round(best_mean, 6), standard_error=round(error, 6),
                   best_ever_mean=round(best_ever, 6), sigma=round(sigma, 6) if sigma else sigma)
    if lines_removed <= 0:
        return SimplifyEvidence(**numbers, allowed=False, why="it removes no net lines of code")
    if candidate_mean > best_mean + error:
        return SimplifyEvidence(**numbers, allowed=False, why=(
            f"its mean {candidate_mean:.6f} is worse than the best's {best_mean:.6f} by more than one standard "
            f"error ({error:.6f})"))
    if candidate_mean > ceiling:
        return SimplifyEvidence(**numbers, allowed=False, why=(
            f"drift guard: its mean {candidate_mean:.6f} would end more than one sigma above the best mean ever "
            f"reached ({best_ever:.6f} + {sigma or 0.0:.6f})"))
    return SimplifyEvidence(**numbers, allowed=True, why=(
        f"removes {lines_removed} line(s) of code for an equal result: mean {candidate_mean:.6f} vs the best's "
        f"{best_mean:.6f} (within one standard error, {error:.6f}), and within one sigma of the best mean ever "
        f"reached ({best_ever:.6f})"))


def simplify_or_discard(judgement: Judgement, parent_source: str, candidate_source: str, runs: list[RunEntry],
                        standing: Standing) -> Judgement:
    """A discard of a change that removed code becomes a `simplify` keep when the rule allows it; the
    evidence says why either way. Anything else is returned as it came."""
    if judgement.status != DISCARD:
        return judgement
    removed = code_lines(parent_source) - code_lines(candidate_source)
    candidate = [r.val_bpb for r in runs if r.val_bpb is not None]
    best_runs, ever = standing.best_runs, standing.best_ever
    if removed <= 0 or not candidate or len(candidate) < len(runs) or not best_runs:
        return judgement  # no code removed, or a run of it crashed
    best_mean = statistics.fmean(best_runs)
    weighed = weigh(candidate, best_runs, best_mean if ever is None else min(ever, best_mean), standing.sigma,
                    removed)
    evidence = judgement.evidence.model_copy(update=dict(simplify=weighed))
    if not weighed.allowed:
        return Judgement(DISCARD, f"{judgement.reason}; not kept as a simplification: {weighed.why}", evidence,
                         judgement.triage)
    evidence = evidence.model_copy(update=dict(kept_as=SIMPLIFY, rule=RULE))
    return Judgement(KEEP, f"simplify: {weighed.why}", evidence, judgement.triage)
