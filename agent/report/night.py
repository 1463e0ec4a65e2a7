"""The night as the morning reads it: everything a workspace holds about it, read once into one model that the
report page, its JSON beside it and `status --json` all draw from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.judging.keep_rule import KeepRule, stored_keep_rule
from agent.judging.tolerances import Tolerances, stored_tolerances
from agent.recording.confirmation import Confirmation, read_confirmation
from agent.recording.gpu_cost import stored_gpu_price
from agent.recording.history import History
from agent.recording.ledger import read_in_flight, read_ledger
from agent.recording.notes import read_notes
from agent.recording.proposal_failures import FailedProposal, read_failures
from agent.recording.record import ExperimentRecord
from agent.recording.transcript import Transcript
from agent.report.curves import Curve, curves
from agent.report.returns import Returns, returns
from agent.report.summary import Headline, headline, night_calibration
from agent.report.timeline import Span, TimeWent, spans, time_went
from agent.running.run_progress import describe, last_step_line, read_phases
from agent.workspace import Workspace


@dataclass
class Night:
    tag: str
    track: dict
    records: list[ExperimentRecord]
    unreadable_lines: int
    headline: Headline
    events: dict[str, list[dict]]             # experiment id -> its transcript's events
    failures: list[FailedProposal]
    in_flight: list[ExperimentRecord]
    doing: dict[str, list[str]]               # experiment id -> the lines `status` shows for it now
    keep_rule: KeepRule
    tolerances: Tolerances | None
    confirmation: Confirmation | None
    notes: str
    imported: dict | None
    cumulative_diff: str                      # train.py, the baseline's commit (the first keep) to the best
    curves: dict[str, Curve]
    spans: list[Span]
    time_went: TimeWent | None
    returns: Returns
    best: ExperimentRecord | None = field(default=None)


def read_night(workspace: Workspace) -> Night:
    records, bad = read_ledger(workspace.dir)
    events = {r.id: Transcript(workspace.dir / r.transcript).events() for r in records if r.transcript}
    history = History(records)
    best, baseline = (history.best(), next(iter(history.kept()), None)) if records else (None, None)
    found = spans(events)
    return Night(
        tag=workspace.tag, track=workspace.track, records=records, unreadable_lines=len(bad),
        headline=headline(records, night_calibration(workspace.dir, workspace.track, records),
                          stored_gpu_price(workspace)),
        events=events, failures=read_failures(workspace.dir), in_flight=read_in_flight(workspace.dir),
        doing=doing(workspace.dir), keep_rule=stored_keep_rule(workspace), tolerances=stored_tolerances(workspace),
        confirmation=read_confirmation(workspace.dir), notes=read_notes(workspace.dir).text,
        imported=workspace.settings.get("imported"),
        cumulative_diff=workspace.repo.git.diff(baseline.commit, best.commit, "--", "train.py") if best and baseline
        else "",
        curves=curves(records, workspace.dir), spans=found, time_went=time_went(found, events),
        returns=returns(records), best=best)


def doing(workspace_dir: Path) -> dict[str, list[str]]:
    """experiment id -> the lines `status` shows for it now (a loop running elsewhere wrote them)."""
    lines: dict[str, list[str]] = {}
    for phase in read_phases(workspace_dir):
        step = last_step_line(workspace_dir / "logs" / Path(phase.log).name) if phase.log else None
        lines.setdefault(phase.experiment_id, []).append(describe(phase, step))
    return lines
