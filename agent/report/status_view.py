"""The view `autoresearch status` prints (and refreshes with --watch)."""

from __future__ import annotations

import statistics
import time

from rich.console import Group
from rich.table import Table
from rich.text import Text

from agent.judging.drift import control_words, flagged_controls
from agent.judging.noise import inflated_floor
from agent.judging.plateau import plateau_lines
from agent.recording.history import History
from agent.recording.novelty_share import tally
from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.recording.research_memory import lessons_by_id, reasoning
from agent.report.night import Night, imported_lines
from agent.report.summary import commit_mean, parse_time, where_ran
from agent.report.verdict import record_verdict
from agent.untrusted import bounded, shown
from agent.workspace import Workspace


def status_view(workspace: Workspace) -> Group:
    """The headline numbers, the noise floor (flagged far above the track's usual), the best's controls (drift
    flagged), failed proposals, the experiments running now and their phases, and the last experiments."""
    night = Night(workspace)
    records = night.records
    lines: list = [shown(line.describe(workspace.dir / "experiments.jsonl", moved=False), style="yellow")
                   for line in night.bad_lines]
    if not records:
        lines.append(Text(f"{workspace.tag}: no experiments yet"))
    else:
        lines += headline_lines(night) + noise_lines(night) + control_lines(records) + spend_lines(night)
    if failed := night.failures:
        spent = sum(f.usage.cost_usd for f in failed)
        lines.append(Text(f"proposals without an experiment: {len(failed)} (${spent:.2f}); last: {failed[-1].kind} "
                          f"for {failed[-1].experiment_id}: {failed[-1].reason[:200]}"))
    if night.confirmation is not None:
        lines += holdout_lines(night.confirmation)
    lines += in_flight_lines(night)
    if records:
        lines.append(last_experiments(records))
    return Group(*lines)


def headline_lines(night: Night) -> list[Text]:
    settings, h = night.workspace.settings, night.headline
    profile = (settings.get("profile") or {}).get("name")
    duty = "duty cycle not recorded" if night.imported else f"duty cycle {h.duty_cycle:.0%}"
    lines = [Text.from_markup(
        f"[bold]{night.tag}[/bold]: track {settings['track']}"
        + (f" (profile {profile})" if profile else "") + f", {h.experiments} experiments, "
        f"{h.keeps} kept besides the baseline, keep rate {h.keep_rate:.0%}, {h.hours:.2f} h, {duty}")]
    lines.extend(shown(line) for line in imported_lines(night.imported))
    if best := night.best:
        lines.append(shown(f"best val_bpb {h.best:.6f} ({best.shown_commit}, {bounded(best.description)}); "
                           f"baseline {h.baseline:.6f}, {h.gain_percent:.2f}% better"))
        if (head := History(night.records).head()) is not None and head.id != best.id:
            lines.append(shown(f"the branch head is the last keep, {head.id} ({head.shown_commit}, "
                               f"{bounded(head.description)}), val_bpb {commit_mean(night.records, head):.6f}"))
    return lines


def holdout_lines(confirmation) -> list[Text]:
    """What the holdout split, which no decision read, kept of the searched gain, and its warnings."""
    kept = f" ({100 * confirmation.retention:.0f}%)" if confirmation.retention is not None else ""
    return [Text(f"held out: gain {confirmation.holdout_gain:+.6f} on the holdout split against "
                 f"{confirmation.search_gain:+.6f} searched{kept}")] + [
        Text(f"warning: {warning}", style="yellow") for warning in confirmation.warnings]


def noise_lines(night: Night) -> list[Text]:
    floors = [r for r in night.records if r.status == ExperimentStatus.NOISE]
    if not floors:
        return []
    floor = floors[-1]
    measured = f"sigma {floor.sigma:.6f}" if floor.sigma is not None else "sigma not measured"
    spread = statistics.stdev(floor.values) if len(floor.values or []) > 1 else None
    if floor.sigma is not None and spread is not None and floor.sigma > 1.5 * spread:
        measured += f" (the runs spread {spread:.6f}; raised to a quarter of the track's usual sigma)"
    lines = [Text(f"noise: {measured} from {len(floor.values or [])} runs of {floor.of} (val_bpb "
                  + ", ".join(f"{v:.6f}" for v in floor.values or [])
                  + f"); {night.headline.confirmed} keep(s) confirmed by a re-run")]
    if warning := inflated_floor(floor.sigma, night.track.track, night.keep_rule.keep_sigmas):
        lines.append(Text(f"warning: {warning}", style="yellow"))
    return lines


def spend_lines(night: Night) -> list[Text]:
    lines, h = [], night.headline
    if h.hardware:
        lines.append(shown(f"hardware: {'; '.join(h.hardware)}"
                           + (" (the runs trained on different machines)" if len(h.hardware) > 1 else "")))
    if h.attention_fallback:
        lines.append(shown(h.attention_fallback, style="yellow"))
    if h.calibration and h.offset is not None:
        lines.append(shown(f"calibrated baseline of that machine: {h.calibration.describe()}; "
                           f"the best is {h.offset:+.6f} from it"))
    if h.crash_rates:
        lines.append(Text("crashes: " + ", ".join(f"{k} {v:.0%}" for k, v in h.crash_rates.items())))
    if h.tokens:
        lines.append(Text(f"LLM: {h.tokens:,} tokens, ${h.cost_usd:.2f} so far"))
    elif night.imported:
        lines.append(Text("LLM: tokens and cost not recorded by the night"))
    if kinds := tally(night.records):
        lines.append(Text("kinds of change: " + "; ".join(kind.line() for kind in kinds)))
    lines.extend(Text(line) for line in plateau_lines(night.records))
    if h.gain_per_gpu_hour is not None:
        priced = f", GPU ${h.gpu_cost_usd:.2f}" if h.gpu_cost_usd is not None else ""
        per_usd = f", {h.gain_per_usd:.4g} per dollar" if h.gain_per_usd is not None else ""
        lines.append(Text(f"cost: {h.gpu_hours:.2f} {h.device}-hours{priced}; val_bpb gained "
                          f"{h.gain_per_gpu_hour:.4g} per {h.device}-hour{per_usd}"))
    return lines


def control_lines(records: list[ExperimentRecord]) -> list[Text]:
    controls = [r for r in records if r.status == ExperimentStatus.CONTROL]
    if not controls:
        return []
    flagged = flagged_controls(records)
    lines = [Text(f"controls: {len(controls)} run(s) of the best, {len(flagged)} flagged as drift")]
    if flagged:
        lines.append(shown(f"warning: {control_words(flagged[-1])}", style="yellow"))
    if controls[-1] not in flagged:
        lines.append(shown(f"last control: {control_words(controls[-1])}"))
    return lines


def in_flight_lines(night: Night) -> list[Text]:
    """A "running:" line per experiment in flight, each followed by what it is doing now, then the phases that
    belong to no experiment in flight (a proposal made ahead, a noise floor, a confirmation)."""
    lines = []
    if conversations := sum(1 for phase, _ in night.phases if phase.phase == "proposing"):
        lines.append(shown(f"conversations open: {conversations} (each proposing one experiment, as shown below)"))
    for current in night.in_flight:
        elapsed = time.time() - parse_time(current.started)
        lines.append(shown(f"running: {current.id} {bounded(current.description)} ({elapsed:.0f} s)"))
        lines.extend(_now(said) for phase, said in night.phases if phase.experiment_id == current.id)
    running = {marker.id for marker in night.in_flight}
    lines.extend(_now(said) for phase, said in night.phases if phase.experiment_id not in running)
    return lines


def _now(said: str) -> Text:
    return shown(f"  now: {said}", 400, style="bold")


def last_experiments(records: list[ExperimentRecord]) -> Table:
    lessons = lessons_by_id(records)
    table = Table("id", "status", "kind", "val_bpb", "triage", "ran on", "description, hypothesis and lesson",
                  title="last experiments")
    for r in records[-10:]:
        why = reasoning(r, lessons, 200)
        said = "".join(f"\n{label}: {text}" for label, text in (("hypothesis", why.hypothesis),
                                                                 ("expected", why.expected),
                                                                 ("lesson", why.lesson)) if text)
        if verdict := record_verdict(r):
            said += f"\ntest: {verdict.words()}"
        table.add_row(shown(r.id, 20), r.kept_as, r.novelty or "-", f"{r.val_bpb:.6f}" if r.val_bpb else "-",
                      shown(r.triage_shown, 30), shown(where_ran(r) or "-", 120),
                      shown(bounded(r.description, 200) + said))
    return table
