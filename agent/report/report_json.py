"""report/report.json: the report page's data for a machine to read, beside the page. It is `status --json`'s
object with what only the page shows besides: each experiment's full record, what each keep cost and what more of
the night would buy, where the time went, and the loss curves."""

from __future__ import annotations

from pydantic import BaseModel

from agent.recording.confirmation import Confirmation
from agent.recording.record import ExperimentRecord
from agent.report.curves import Curve
from agent.report.night import Night
from agent.report.returns import MODEL, Returns
from agent.report.status_json import NightStatus, status_of
from agent.report.timeline import Span, TimeWent


class ReportData(BaseModel):
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
