"""What the runs of a night cost in GPU time: GPU-hours, and dollars at --gpu-usd-per-hour where it was given.
GPU-hours are the runner's wall clock of every run (experiments, their re-runs, runs on parents the best moved on
from, noise floors) times the one GPU a run holds; `run` keeps the price in run.json, where the report reads it."""

from __future__ import annotations

from agent.recording.record import ExperimentRecord
from agent.workspace import Workspace

STORED_AS = "gpu_usd_per_hour"  # its key in run.json


def gpu_hours(records: list[ExperimentRecord]) -> float:
    seconds = 0.0
    for record in records:
        runs = [run for moved in record.rebased_from for run in moved.runs] + record.runs
        seconds += sum(run.seconds or 0.0 for run in runs) if runs else record.timings.run_s or 0.0
    return seconds / 3600  # a run holds one GPU


def gpu_cost_usd(records: list[ExperimentRecord], usd_per_hour: float | None) -> float:
    return gpu_hours(records) * usd_per_hour if usd_per_hour else 0.0


def stored_gpu_price(workspace: Workspace) -> float | None:
    price = workspace.settings.get(STORED_AS)
    return float(price) if isinstance(price, (int, float)) and not isinstance(price, bool) and price > 0 else None


def store_gpu_price(workspace: Workspace, usd_per_hour: float | None) -> None:
    workspace.update_settings(**{STORED_AS: usd_per_hour})
