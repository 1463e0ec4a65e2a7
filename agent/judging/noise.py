"""Run-to-run noise and the decision rule that looks past it.

A workspace measures sigma of val_bpb by re-running its best commit with other seeds (the
noise floor: after the baseline, and again every few keeps, because noise changes with the
model). A candidate is compared with the mean of every run of the best commit:
- gain > SIGMAS x sigma on its one run: a clear win, kept;
- 0 < gain <= SIGMAS x sigma: a close call, run again with a fresh seed, then kept only if
  the mean gain exceeds SIGMAS standard errors of the difference of the two means;
- otherwise discarded.
Without a noise floor (noise_seeds 0) a change is kept when it beats the best by min_delta.
"""

from __future__ import annotations

import secrets
import statistics
from dataclasses import dataclass, field
from enum import StrEnum

from agent.judging.significance import one_sided_p, standard_error, z_score
from agent.judging.usual_sigma import usual_sigmas
from agent.recording.record import Evidence, ExperimentRecord, ExperimentStatus, RunEntry
from trainer.tracks.spec import TrackConstants


class CloseCall(StrEnum):
    """A judgement that is no status of the ledger's: run the candidate again, then judge the mean."""
    CLOSE = "close"


KEEP, DISCARD, CRASH, CLOSE = ExperimentStatus.KEEP, ExperimentStatus.DISCARD, ExperimentStatus.CRASH, CloseCall.CLOSE

# sigma of val_bpb between seeds of a track's baseline, as benchmarks/noise.py measured it (usual_sigma.json). A
# floor far above it means something besides the seed moves the numbers: on a track whose budget is time, most
# often other work on the machine, which no rule can see past.
USUAL = usual_sigmas()
USUAL_SIGMA = {track: measured.sigma for track, measured in USUAL.items()}
INFLATED_RATIO = 3.0  # with three values, P(stdev > 3 sigma) is about 1e-4 when nothing else is going on
# With three values, P(stdev < sigma / 4) is about 3%; runs that come out the same whatever their seed say that
# the seed does not reach them, and a floor of 0 would keep a gain of nothing: such a floor is raised to this share.
LOW_RATIO = 0.25


@dataclass
class Judgement:
    status: ExperimentStatus | CloseCall
    reason: str
    evidence: Evidence = field(default_factory=Evidence)
    triage: str | None = None  # overrides the run's triage class (tamper found by verification)


def judge(candidate: list[float], best: list[float], sigma: float | None, sigmas: float = 2.0,
          min_delta: float = 0.0, sigma_df: int | None = None) -> Judgement:
    """The verdict on a candidate's val_bpb runs against the best commit's runs (lower is better); sigma_df: the
    degrees of freedom sigma rests on (its p-value is Student's t)."""
    gain = statistics.fmean(best) - statistics.fmean(candidate)
    evidence = Evidence(candidate_runs=candidate, best_runs=best, gain=round(gain, 6),
                        sigma=round(sigma, 6) if sigma else sigma)
    if (z := z_score(gain, sigma, len(candidate), len(best))) is not None:
        evidence.z, evidence.p = round(z, 4), round(one_sided_p(z, sigma_df), 6)
        if sigma_df is not None:
            evidence.sigma_df = sigma_df
    said = (f"mean of {len(candidate)} run(s) {statistics.fmean(candidate):.6f} vs the best's mean "
            f"{statistics.fmean(best):.6f}")
    if sigma is None:
        evidence.rule = f"gain > {min_delta} (no noise floor measured)"
        if gain > min_delta:
            return Judgement(KEEP, f"{said}: gain {gain:.6f} > {min_delta}", evidence)
        return Judgement(DISCARD, f"{said}: gain {gain:.6f} is not above {min_delta}", evidence)
    if len(candidate) == 1:
        threshold = max(sigmas * sigma, min_delta)
        evidence.rule = f"one run: gain > {sigmas:g} sigma keeps, 0 < gain <= {sigmas:g} sigma re-runs"
        evidence.threshold = round(threshold, 6)
        if gain > threshold:
            return Judgement(KEEP, f"{said}: gain {gain:.6f} > {sigmas:g} sigma ({threshold:.6f}), a clear win",
                             evidence)
        if gain > 0:
            return Judgement(CLOSE, f"{said}: gain {gain:.6f} is inside {sigmas:g} sigma ({threshold:.6f}), "
                                      "a close call: running it again with a fresh seed", evidence)
        return Judgement(DISCARD, f"{said}: no gain", evidence)
    threshold = max(sigmas * standard_error(sigma, len(candidate), len(best)), min_delta)
    evidence.rule = f"mean of runs: gain > {sigmas:g} x sigma x sqrt(1/{len(candidate)} + 1/{len(best)})"
    evidence.threshold = round(threshold, 6)
    if gain > threshold:
        return Judgement(KEEP, f"{said}: gain {gain:.6f} > {threshold:.6f}, confirmed by the re-run", evidence)
    return Judgement(DISCARD, f"{said}: gain {gain:.6f} is not above {threshold:.6f}, the re-run did not "
                                "confirm it", evidence)


def inflated_floor(sigma: float | None, track: str, keep_sigmas: float = 2.0) -> str | None:
    usual = USUAL_SIGMA.get(track)
    if sigma is None or not usual or sigma <= INFLATED_RATIO * usual:
        return None
    if not TrackConstants.of_track(track).counted:
        why = "is the machine busy?"
    else:  # a step or FLOPs budget trains the same whatever else the machine does
        why = ("this track's budget counts steps or FLOPs, not time, so a busy machine does not explain it: the "
               "seeds alone move it that much (or train.py varies between runs in some other way).")
    return (f"sigma {sigma:.4g} is {sigma / usual:.0f}x this track's usual {usual:g} "
            f"({USUAL[track].seeds_words()}): {why} "
            f"While it stays this high only gains above {keep_sigmas * sigma:.3g} can be kept")


def floored(sigma: float | None, track: str) -> tuple[float | None, str | None]:
    """sigma, raised to LOW_RATIO of the track's usual sigma when it is below that, with a warning saying so."""
    usual = USUAL_SIGMA.get(track)
    if sigma is None or not usual or sigma >= LOW_RATIO * usual:
        return sigma, None
    return LOW_RATIO * usual, (
        f"sigma {sigma:.4g} is under {LOW_RATIO:g} of this track's usual {usual:g}: runs with other seeds came out "
        f"(nearly) the same, as if the seed did not reach them; {LOW_RATIO * usual:g} is used instead, so that a "
        "gain of nothing is not kept")


def sigma_of(values: list[float]) -> float | None:
    return statistics.stdev(values) if len(values) >= 2 else None


def wants_noise_floor(records: list[ExperimentRecord], noise_seeds: int, every_keeps: int) -> bool:
    """After the baseline, and once every_keeps keeps have happened since the last floor."""
    if noise_seeds <= 0 or not any(r.status == KEEP for r in records):
        return False
    last_floor = max((i for i, r in enumerate(records) if r.status == ExperimentStatus.NOISE), default=None)
    if last_floor is None:
        return True
    keeps_since = sum(1 for r in records[last_floor + 1:] if r.status == KEEP)
    return every_keeps > 0 and keeps_since >= every_keeps


# Seeds after the baseline's are drawn at random from this range: a train.py that could tell its first run from
# its re-runs or the best's control runs by the seed (the next seed is predictable when seeds count up) could
# sabotage the runs that set the bar and move it.
SEED_RANGE = 2 ** 31


def fresh_seed(records: list[ExperimentRecord], base: int, also_used: list[RunEntry] = (),
               counted: bool = False) -> int:
    """A seed no run of this workspace used yet, drawn unpredictably (never the base seed, the baseline's);
    counted: one more than the largest used, for tests that need the night's runs to come out the same."""
    runs = [run for r in records for run in r.runs] + list(also_used)
    used = {base, *(run.seed for run in runs if run.seed is not None)}
    if counted:
        return max(used) + 1
    while (seed := secrets.randbelow(SEED_RANGE)) in used:
        continue
    return seed
