"""Writing workspace/<tag>/report/index.html and progress.png (and a comparison of several tags)."""

from __future__ import annotations

from pathlib import Path

from agent.recording.ledger import read_in_flight, read_records
from agent.recording.notes import read_notes
from agent.recording.proposal_failures import read_failures
from agent.recording.record import ExperimentStatus
from agent.recording.transcript import Transcript
from agent.report.page import comparison_page, page
from agent.report.plot import comparison_png, progress_png
from agent.report.summary import headline
from agent.running.run_progress import describe, last_step_line, read_phases
from agent.workspace import Workspace
from trainer.atomic import read_json


def write_report(workspace: Workspace) -> Path:
    records = read_records(workspace.dir)
    events = {r.id: Transcript(workspace.dir / r.transcript).events() for r in records if r.transcript}
    kept = [r for r in records if r.status == ExperimentStatus.KEEP]
    cumulative = workspace.repo.git.diff(workspace.root_commit(), kept[-1].commit, "--", "train.py") if kept else ""
    png = progress_png(records, f"{workspace.tag}: val_bpb per experiment")
    out = workspace.dir / "report"
    out.mkdir(exist_ok=True)
    (out / "progress.png").write_bytes(png)
    index = out / "index.html"
    confirmation = read_json(workspace.dir / "confirmation.json")
    index.write_text(page(workspace.tag, workspace.track, records, headline(records), png, cumulative, events,
                          confirmation, read_failures(workspace.dir), read_notes(workspace.dir).text,
                          read_in_flight(workspace.dir), doing(workspace)))
    return index


def doing(workspace: Workspace) -> dict[str, list[str]]:
    """experiment id -> the lines `status` shows for it now (a loop running elsewhere wrote them)."""
    lines: dict[str, list[str]] = {}
    for phase in read_phases(workspace.dir):
        step = last_step_line(workspace.dir / "logs" / Path(phase.log).name) if phase.log else None
        lines.setdefault(phase.experiment_id, []).append(describe(phase, step))
    return lines


def write_comparison(workspaces: list[Workspace], destination: Path) -> Path:
    runs = {w.tag: read_records(w.dir) for w in workspaces}
    png = comparison_png(runs)
    destination.mkdir(parents=True, exist_ok=True)
    (destination / "progress.png").write_bytes(png)
    index = destination / "index.html"
    index.write_text(comparison_page({tag: headline(records) for tag, records in runs.items()}, png))
    return index
