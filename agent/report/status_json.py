"""What `autoresearch status --json` prints, one JSON object, and report/report.json beside the page (that object
and what only the page shows): the status view's numbers (summary.py's headline, verdict.py's verdicts), typed, so
that a script or a dashboard never parses the terminal's lines."""

from __future__ import annotations

from pydantic import BaseModel

from agent.recording.confirmation import Confirmation
from agent.recording.record import ExperimentRecord
from agent.report.curves import Curve
from agent.report.night import Night
from agent.report.returns import MODEL, Returns
from agent.report.summary import Headline
from agent.report.timeline import Span, TimeWent
from agent.report.verdict import record_verdict
from agent.workspace import Workspace


class ExperimentLine(BaseModel):
    id: str
    status: str
    description: str
    val_bpb: float | None
    triage: str | None
    gain: float | None = None         # what its rule compared: its runs' mean against the best's mean then
    z: float | None = None
    p: float | None = None
    sigma_df: int | None = None       # p is Student's t with these degrees of freedom (None: the normal tail)
    implausible_fall: str | None = None
    runs: int


class NightStatus(BaseModel):
    tag: str
    track: str
    best_id: str | None
    headline: Headline                # the view's numbers (agent/report/summary.py), device-hours in gpu_hours
    gain_percent: float
    spent_usd: float                  # LLM spend (failed proposals' included), and GPU time where priced
    gain_per_device_hour: float | None
    gain_per_usd: float | None
    in_flight: list[str]              # ids of the experiments running now
    failed_proposals: int
    unreadable_ledger_lines: int
    history: list[ExperimentLine]


def night_status(workspace: Workspace) -> NightStatus:
    return status_of(Night(workspace))


def status_of(night: Night) -> NightStatus:
    h, best = night.headline, night.best
    return NightStatus(
        tag=night.tag, track=night.track.track, best_id=best.id if best else None, headline=h,
        gain_percent=round(h.gain_percent, 4), spent_usd=h.spent_usd, gain_per_device_hour=h.gain_per_gpu_hour,
        gain_per_usd=h.gain_per_usd,
        in_flight=[m.id for m in night.in_flight], failed_proposals=len(night.failures),
        unreadable_ledger_lines=len(night.bad_lines), history=[_line(r) for r in night.records])


def _line(record) -> ExperimentLine:
    verdict = record_verdict(record)
    return ExperimentLine(id=record.id, status=record.status.value, description=record.description,
                          val_bpb=record.val_bpb, triage=record.triage, runs=len(record.runs),
                          implausible_fall=record.evidence.implausible_fall,
                          **({"gain": verdict.gain, "z": verdict.z, "p": verdict.p, "sigma_df": verdict.df}
                             if verdict else {}))


class ReportData(BaseModel):
    """Besides the status: each experiment's full record, what each keep cost and what more of the night would buy,
    where the time went, and the loss curves."""
    status: NightStatus
    experiments: list[ExperimentRecord]
    returns: Returns
    returns_model: str
    time_went: TimeWent | None
    spans: list[Span]
    loss_curves: dict[str, Curve]     # experiment id -> (percent of the budget, training loss), from its log
    confirmation: Confirmation | None  # every keep scored on val and on the holdout split, and the warnings


def report_data(night: Night) -> ReportData:
    return ReportData(status=status_of(night), experiments=night.records, returns=night.returns, returns_model=MODEL,
                      time_went=night.time_went, spans=night.spans, loss_curves=night.curves,
                      confirmation=night.confirmation)
