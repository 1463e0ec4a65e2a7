"""The night as the morning reads it: one model of everything a workspace holds about it, which the report page,
its JSON beside it, `status`, `status --json` and the end-of-night notification all draw from. What is costly to
read (transcripts, logs' loss curves, the git diff) is read once, when first asked for, so a view that refreshes
every few seconds pays only for what it shows."""

from __future__ import annotations

from functools import cached_property
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


class Night:
    def __init__(self, workspace: Workspace):
        self.workspace = workspace
        self.tag, self.track = workspace.tag, workspace.track
        self.records, bad = read_ledger(workspace.dir)
        self.bad_lines = bad
        history = History(self.records)
        self.best: ExperimentRecord | None = history.best() if self.records else None
        self.baseline: ExperimentRecord | None = next(iter(history.kept()), None)

    @property
    def unreadable_lines(self) -> int:
        return len(self.bad_lines)

    @cached_property
    def headline(self) -> Headline:
        w = self.workspace
        return headline(self.records, night_calibration(w.dir, w.track, self.records), stored_gpu_price(w),
                        sum(f.usage.cost_usd for f in self.failures))

    @cached_property
    def events(self) -> dict[str, list[dict]]:
        """experiment id -> its transcript's events."""
        return {r.id: Transcript(self.workspace.dir / r.transcript).events() for r in self.records if r.transcript}

    @cached_property
    def failures(self) -> list[FailedProposal]:
        return read_failures(self.workspace.dir)

    @cached_property
    def in_flight(self) -> list[ExperimentRecord]:
        return read_in_flight(self.workspace.dir)

    @cached_property
    def doing(self) -> dict[str, list[str]]:
        """experiment id -> the lines `status` shows for it now (a loop running elsewhere wrote them)."""
        lines: dict[str, list[str]] = {}
        for phase in read_phases(self.workspace.dir):
            step = last_step_line(self.workspace.dir / "logs" / Path(phase.log).name) if phase.log else None
            lines.setdefault(phase.experiment_id, []).append(describe(phase, step))
        return lines

    @cached_property
    def keep_rule(self) -> KeepRule:
        return stored_keep_rule(self.workspace)

    @cached_property
    def tolerances(self) -> Tolerances | None:
        return stored_tolerances(self.workspace)

    @cached_property
    def confirmation(self) -> Confirmation | None:
        return read_confirmation(self.workspace.dir)

    @cached_property
    def notes(self) -> str:
        return read_notes(self.workspace.dir).text

    @property
    def imported(self) -> dict | None:
        return self.workspace.settings.get("imported")

    @cached_property
    def cumulative_diff(self) -> str:
        """train.py, from the baseline's commit (the first keep) to the best's."""
        if self.best is None or self.baseline is None:
            return ""
        return self.workspace.repo.git.diff(self.baseline.commit, self.best.commit, "--", "train.py")

    @cached_property
    def curves(self) -> dict[str, Curve]:
        return curves(self.records, self.workspace.dir)

    @cached_property
    def spans(self) -> list[Span]:
        return spans(self.events)

    @cached_property
    def time_went(self) -> TimeWent | None:
        return time_went(self.spans, self.events)

    @cached_property
    def returns(self) -> Returns:
        return returns(self.records)


def read_night(workspace: Workspace) -> Night:
    return Night(workspace)
