"""The test behind a decided experiment, in numbers and words, as the report and `status` show it: the gain,
sigma, how many runs each side had, z and its one-sided p-value, the threshold, and why it was kept or not.
Records judged before z and p were stored get them computed alike (agent/judging/significance.py)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.judging.significance import one_sided_p, z_score
from agent.recording.record import SIMPLIFY, Evidence, ExperimentRecord, ExperimentStatus

SMALLEST_P = 1e-6  # below it a tail probability says nothing more about a few runs


@dataclass(frozen=True)
class Verdict:
    gain: float
    sigma: float | None
    candidate_runs: int
    best_runs: int
    z: float | None
    p: float | None
    threshold: float | None
    rule: str | None
    why: str
    df: int | None = None  # of sigma: p is Student's t with them, else the normal tail

    def words(self) -> str:
        sigma = f"sigma {self.sigma:.6f}" if self.sigma else "no sigma measured"
        tail = f"t, {self.df} df" if self.df else "normal tail"
        p = f"{self.p:.3g}" if self.p is not None and self.p >= SMALLEST_P else f"< {SMALLEST_P:g}"
        test = (f"z {self.z:.2f}, p {p} ({tail})" if self.z is not None and self.p is not None
                else "z and p need a noise floor")
        threshold = f"threshold {self.threshold:.6f}" if self.threshold is not None else f"rule {self.rule}"
        return (f"gain {self.gain:+.6f}, {sigma}, runs {self.candidate_runs} vs the best's {self.best_runs}, "
                f"{test}, {threshold}: {self.why}")


def verdict_of(evidence: Evidence, status: ExperimentStatus | str, triage: str | None = None) -> Verdict | None:
    """The test of a judged experiment; None where nothing was compared (the baseline, a noise floor, a crash
    before any number)."""
    if evidence.gain is None:
        return None
    gain, sigma = evidence.gain, evidence.sigma
    candidate = sum(1 for value in evidence.candidate_runs or [] if value is not None)
    best = len(evidence.best_runs or [])
    z = evidence.z if evidence.z is not None else z_score(gain, sigma, candidate, best)
    p = evidence.p if evidence.p is not None else one_sided_p(z, evidence.sigma_df) if z is not None else None
    return Verdict(gain=gain, sigma=sigma, candidate_runs=candidate, best_runs=best, z=z, p=p,
                   threshold=evidence.threshold, rule=evidence.rule, df=evidence.sigma_df,
                   why=_why(evidence, ExperimentStatus(str(status)), triage))


def record_verdict(record: ExperimentRecord) -> Verdict | None:
    return verdict_of(record.evidence, record.status, record.triage) if record.is_experiment else None


def _why(evidence: Evidence, status: ExperimentStatus, triage: str | None) -> str:
    gain, threshold = evidence.gain, evidence.threshold
    if status == ExperimentStatus.KEEP:
        if evidence.kept_as == SIMPLIFY:
            return "kept as a simplification: fewer lines for an equal result"
        if threshold is not None:
            return f"kept: the gain is above the threshold{' after the re-run' if _reran(evidence) else ''}"
        return "kept: the gain is above the minimum (no noise floor)"
    if status == ExperimentStatus.DISCARD:
        if gain <= 0:
            return "discarded: no gain"
        if threshold is not None and gain <= threshold:
            return ("discarded: the re-run did not confirm the gain" if _reran(evidence)
                    else "discarded: the gain is not above the threshold")
        return "discarded: the gain is not above the minimum"
    if status == ExperimentStatus.SUPERSEDED:
        return "superseded: the best moved on and its edits no longer apply"
    return f"not kept: {status.value}" + (f" ({triage})" if triage else "")


def _reran(evidence: Evidence) -> bool:
    return len(evidence.candidate_runs or []) > 1
