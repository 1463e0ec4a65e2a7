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
from agent.running.run_progress import Phase, describe, last_step_line, read_phases
from agent.workspace import Workspace


class Night:
    def __init__(self, workspace: Workspace):
        self.workspace = workspace
        self.tag, self.track = workspace.tag, workspace.track
        self.records, self.bad_lines = read_ledger(workspace.dir)
        history = History(self.records)
        self.best: ExperimentRecord | None = history.best() if self.records else None
        self.baseline: ExperimentRecord | None = history.baseline()
        self.failures: list[FailedProposal] = read_failures(workspace.dir)
        self.in_flight: list[ExperimentRecord] = read_in_flight(workspace.dir)
        self.confirmation: Confirmation | None = read_confirmation(workspace.dir)
        self.imported: dict | None = workspace.settings.get("imported")
        self.notes = read_notes(workspace.dir).text

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
    def phases(self) -> list[tuple[Phase, str]]:
        """The phases a loop running elsewhere is in now, each with the line `status` shows for it."""
        logs = self.workspace.dir / "logs"
        return [(phase, describe(phase, last_step_line(logs / Path(phase.log).name) if phase.log else None))
                for phase in read_phases(self.workspace.dir)]

    @cached_property
    def keep_rule(self) -> KeepRule:
        return stored_keep_rule(self.workspace)

    @cached_property
    def tolerances(self) -> Tolerances | None:
        return stored_tolerances(self.workspace)

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


def imported_lines(imported: dict | None, results: bool = True) -> list[str]:
    """Where an imported night came from (the page leaves out its results file), what it ran under, and whether
    `run` may go on with it; none for a night this loop ran."""
    if not imported:
        return []
    lines = [f"imported from {imported['from']} (branch {imported['branch']}"
             + (f", {imported['results']}" if results and imported.get("results") else "") + ")"]
    if constants := imported.get("constants"):
        lines.append(f"ran under {', '.join(constants)}; hardware {imported.get('hardware') or 'not recorded'}")
    if statuses := imported.get("statuses"):
        lines.append("statuses read as ours: " + ", ".join(f"{word} -> {ours}" for word, ours in statuses.items()))
    lines.append(f"`run` cannot continue it: {imported['cannot_continue']}" if imported.get("cannot_continue")
                 else "`run` goes on from its last keep")
    return lines
