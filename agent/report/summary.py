"""The numbers of a run, computed from its ledger records."""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from agent.recording.calibration import Calibration, calibration_for
from agent.recording.gpu_cost import gpu_cost_usd, gpu_hours
from agent.recording.history import History
from agent.recording.record import ExperimentRecord, ExperimentStatus, summary_number
from agent.report.attention import fallback_line
from trainer.prepare import cache_root
from trainer.tracks.spec import FrozenTrack


def parse_time(stamp: str) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z"))


@dataclass
class Headline:
    baseline: float | None
    best: float | None
    experiments: int
    keeps: int
    keep_rate: float
    crash_rates: dict[str, float]
    hours: float
    duty_cycle: float
    tokens: int
    cost_usd: float
    sigma: float | None     # run-to-run sigma of val_bpb from the latest noise floor
    confirmed: int          # keeps decided on the mean of re-runs (close calls that held up)
    hardware: list[str]     # the machines the runs trained on, described, in the order they first did
    calibration: Calibration | None = None  # the calibrated baseline of the machine the best trained on
    gpu_hours: float = 0.0                  # the runs' wall clock x one device each
    device: str = "GPU"                     # what they trained on, in the night's cost lines: "CPU" where no GPU
    gpu_cost_usd: float | None = None       # gpu_hours at --gpu-usd-per-hour; None where no price was given
    imported: bool = False                  # a night another loop ran: timings, LLM spend, programs unrecorded
    attention_fallback: str | None = None   # runs that trained without the FlashAttention-3 they asked for

    @property
    def offset(self) -> float | None:
        """The best's val_bpb less its machine's calibrated baseline (negative: better than the baseline)."""
        return self.best - self.calibration.mean if self.best is not None and self.calibration else None

    @property
    def gain(self) -> float:
        return (self.baseline - self.best) if self.baseline is not None and self.best is not None else 0.0

    @property
    def gain_per_gpu_hour(self) -> float | None:
        return self.gain / self.gpu_hours if self.gpu_hours > 0 else None

    @property
    def spent_usd(self) -> float:
        """LLM spend, plus GPU time where it was priced."""
        return self.cost_usd + (self.gpu_cost_usd or 0.0)

    @property
    def gain_per_usd(self) -> float | None:
        return self.gain / self.spent_usd if self.spent_usd > 0 else None

    @property
    def gain_percent(self) -> float:
        return 100 * self.gain / self.baseline if self.baseline else 0.0


def headline(records: list[ExperimentRecord], calibration: Calibration | None = None,
             gpu_usd_per_hour: float | None = None, failed_usd: float = 0.0) -> Headline:
    """The night's numbers; failed_usd: what proposals that never became experiments spent."""
    history = History(records)
    experiments, kept = history.experiments(), history.kept()
    proposed = [r for r in experiments if r.proposer != "baseline"]
    keeps = [r for r in kept if r.proposer != "baseline"]
    crashes = Counter(r.triage or "crash" for r in experiments
                      if r.status in (ExperimentStatus.CRASH, ExperimentStatus.INTERRUPTED))
    wall = (parse_time(records[-1].finished) - parse_time(records[0].started)) if records else 0.0
    return Headline(
        baseline=commit_mean(records, kept[0]) if kept else None,
        best=commit_mean(records, history.best()) if kept else None, experiments=len(experiments),
        keeps=len(keeps), keep_rate=len(keeps) / len(proposed) if proposed else 0.0,
        crash_rates={k: v / len(experiments) for k, v in sorted(crashes.items())},
        hours=wall / 3600, duty_cycle=sum(map(training_seconds, records)) / wall if wall > 0 else 0.0,
        tokens=sum(r.llm.input_tokens + r.llm.output_tokens for r in records),
        cost_usd=sum(r.llm.cost_usd for r in records) + failed_usd, sigma=history.sigma(),
        confirmed=sum(1 for r in keeps if len(r.runs) > 1),
        hardware=list(dict.fromkeys(r.hardware.describe() for r in records if r.hardware)), calibration=calibration,
        gpu_hours=gpu_hours(records), device=device_unit(records),
        gpu_cost_usd=gpu_cost_usd(records, gpu_usd_per_hour) if gpu_usd_per_hour else None,
        imported=any(r.imported is not None for r in records),
        attention_fallback=fallback_line([r for r in records if r.is_experiment]))


def device_unit(records: list[ExperimentRecord]) -> str:
    """GPU where a run of the night reached one, or where no run was recorded (an imported night); else CPU."""
    devices = {run.device for r in records for run in r.runs if run.device}
    return "GPU" if "cuda" in devices or not devices else "CPU"


def night_calibration(workspace_dir: Path, track: FrozenTrack, records: list[ExperimentRecord]) -> Calibration | None:
    """The calibrated baseline of the machine the night's best (else its latest run) trained on."""
    best = History(records).best()
    machine = (best.hardware if best else None) or next((r.hardware for r in reversed(records) if r.hardware), None)
    return calibration_for(workspace_dir, cache_root(), track, machine)


def commit_mean(records: list[ExperimentRecord], record: ExperimentRecord) -> float:
    """val_bpb of a kept commit: the mean of all its runs (its experiment's, and noise-floor re-runs)."""
    values = History(records).runs_of(record.commit)
    return statistics.fmean(values) if values else record.val_bpb


def training_seconds(record: ExperimentRecord) -> float:
    if record.runs:
        return sum(summary_number(run.training_seconds) or 0.0 for run in record.runs)
    return summary_number(record.summary.get("training_seconds")) or 0.0


def gains_by_program(records: list[ExperimentRecord]) -> dict[str, tuple[int, int, float]]:
    """program -> (experiments, keeps, summed val_bpb gain of its keeps)."""
    out: dict[str, tuple[int, int, float]] = {}
    best = None
    for r in records:
        if not r.is_experiment:
            continue
        name = r.program.name or "?"
        count, kept, gain = out.get(name, (0, 0, 0.0))
        if r.status == ExperimentStatus.KEEP:
            if best is not None and r.proposer != "baseline":
                kept, gain = kept + 1, gain + best - commit_mean(records, r)
            best = commit_mean(records, r)
        out[name] = (count + 1, kept, gain)
    return out


def where_ran(record: ExperimentRecord) -> str:
    """What ran the record's runs (a local slot and its GPU, a spool worker, a cluster node), each named once in
    the order of the runs, those on parents the best moved on from first; "" when no run said."""
    earlier = [run for moved in record.rebased_from for run in moved.runs]
    return "; ".join(dict.fromkeys(run.where for run in earlier + record.runs if run.where))
