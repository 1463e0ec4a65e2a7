"""Writing workspace/<tag>/report/: index.html, progress.png, and report.json (the page's data for a machine to
read), and a comparison of several tags."""

from __future__ import annotations

from pathlib import Path

from agent.report.night import Night
from agent.report.page import comparison_page, page
from agent.report.plot import PLOT_STYLES, comparison_png
from agent.report.status_json import report_data
from agent.report.timeline import timeline_png
from agent.workspace import Workspace


def write_report(workspace: Workspace, plot_style: str = "ours") -> Path:
    """plot_style: a key of PLOT_STYLES (ours, or the reference notebook's)."""
    night = Night(workspace)
    png = PLOT_STYLES[plot_style](night.records, f"{workspace.tag}: val_bpb per experiment")
    out = workspace.dir / "report"
    out.mkdir(exist_ok=True)
    (out / "progress.png").write_bytes(png)
    (out / "report.json").write_text(report_data(night).model_dump_json(indent=1))
    index = out / "index.html"
    index.write_text(page(night, png, timeline_png(night.spans)))
    return index


def write_comparison(workspaces: list[Workspace], destination: Path) -> Path:
    nights = {w.tag: Night(w) for w in workspaces}
    png = comparison_png({tag: night.records for tag, night in nights.items()})
    destination.mkdir(parents=True, exist_ok=True)
    (destination / "progress.png").write_bytes(png)
    index = destination / "index.html"
    headlines = {tag: night.headline for tag, night in nights.items()}  # each tag's own, its GPU price included
    index.write_text(comparison_page(headlines, png))
    return index
