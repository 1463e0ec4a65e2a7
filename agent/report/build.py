"""Writing workspace/<tag>/report/index.html and progress.png (and a comparison of several tags)."""

from __future__ import annotations

from pathlib import Path

from agent.judging.keep_rule import stored_keep_rule
from agent.judging.tolerances import stored_tolerances
from agent.recording.confirmation import read_confirmation
from agent.recording.gpu_cost import stored_gpu_price
from agent.recording.history import History
from agent.recording.ledger import read_in_flight, read_records
from agent.recording.notes import read_notes
from agent.recording.proposal_failures import read_failures
from agent.recording.transcript import Transcript
from agent.report.page import comparison_page, page
from agent.report.plot import PLOT_STYLES, comparison_png
from agent.report.summary import headline, night_calibration
from agent.running.run_progress import describe, last_step_line, read_phases
from agent.workspace import Workspace


def write_report(workspace: Workspace, plot_style: str = "ours") -> Path:
    """plot_style: a key of PLOT_STYLES (ours, or the reference notebook's)."""
    records = read_records(workspace.dir)
    events = {r.id: Transcript(workspace.dir / r.transcript).events() for r in records if r.transcript}
    best = History(records).best()
    cumulative = workspace.repo.git.diff(workspace.root_commit(), best.commit, "--", "train.py") if best else ""
    png = PLOT_STYLES[plot_style](records, f"{workspace.tag}: val_bpb per experiment")
    out = workspace.dir / "report"
    out.mkdir(exist_ok=True)
    (out / "progress.png").write_bytes(png)
    index = out / "index.html"
    confirmation = read_confirmation(workspace.dir)
    h = headline(records, night_calibration(workspace.dir, workspace.track, records), stored_gpu_price(workspace))
    index.write_text(page(workspace.tag, workspace.track, records, h, png, cumulative, events,
                          confirmation, read_failures(workspace.dir), read_notes(workspace.dir).text,
                          read_in_flight(workspace.dir), doing(workspace), stored_keep_rule(workspace),
                          workspace.settings.get("imported"), stored_tolerances(workspace)))
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
    headlines = {w.tag: headline(runs[w.tag], night_calibration(w.dir, w.track, runs[w.tag])) for w in workspaces}
    index.write_text(comparison_page(headlines, png))
    return index
