"""The report page: one self-contained HTML file (inline CSS, the plot as a data URI, no scripts). Everything that
came from a model or a log is escaped: the page shows it, never runs it."""

from __future__ import annotations

import base64
import json
import statistics
import time
from html import escape

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from agent.judging.compute import baseline_runs, spent, uncounted
from agent.judging.drift import control_words
from agent.judging.false_keeps import expected_false_keeps_words
from agent.judging.keep_rule import KeepRule
from agent.judging.noise import inflated_floor
from agent.judging.plateau import describe as plateau_described
from agent.judging.plateau import plateaus
from agent.judging.tolerances import Tolerances
from agent.recording.confirmation import Confirmation
from agent.recording.novelty_share import tally
from agent.recording.record import SIMPLIFY, ExperimentRecord, ExperimentStatus, summary_number
from agent.recording.research_memory import lessons_by_id, proposed, reasoning
from agent.report.curves import Curve, compared_with, curve_svg
from agent.report.night import Night, imported_lines
from agent.report.returns import MODEL, Returns
from agent.report.summary import Headline, gains_by_program, where_ran
from agent.report.timeline import TimeWent
from agent.report.verdict import record_verdict
from agent.untrusted import escape_controls
from trainer.tracks.spec import FrozenTrack, TrackConstants

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0 auto;max-width:1180px;padding:24px;
color:#1f2933;background:#fbfbfd}
.warning{color:#9a3412;background:#fff7ed;border-left:3px solid #ea580c;padding:6px 10px}
h1{margin:0 0 4px}h2{margin-top:36px;border-bottom:1px solid #e4e7eb;padding-bottom:4px}
.meta{color:#616e7c}.cards{display:flex;flex-wrap:wrap;gap:12px;margin:16px 0}
.card{background:#fff;border:1px solid #e4e7eb;border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:20px}.card span{color:#616e7c;font-size:12px}
img.plot{width:100%;border:1px solid #e4e7eb;border-radius:8px;background:#fff}
table{border-collapse:collapse;width:100%;background:#fff}td,th{border-bottom:1px solid #eef0f3;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f5f7fa}
.keep{color:#1f9d55;font-weight:600}.discard{color:#7b8794}.crash,.interrupted{color:#d64545;font-weight:600}
.superseded{color:#b7791f}
.change{background:#fff;border:1px solid #e4e7eb;border-radius:8px;padding:10px 14px;margin:12px 0}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0}.diff pre{font-size:12px}
details{margin:6px 0}summary{cursor:pointer}details.transcript{background:#fff;border:1px solid #e4e7eb;
border-radius:8px;padding:6px 12px}.event{border-left:3px solid #cbd2d9;padding:2px 10px;margin:8px 0}
.thinking{border-color:#9f7aea;font-style:italic}.assistant{border-color:#3182ce}.tool{border-color:#d69e2e}
.curves{display:flex;flex-wrap:wrap;gap:8px}.curvecell{margin:0;max-width:280px}
.error{border-color:#d64545}.decision{border-color:#1f9d55;font-weight:600}.small{font-size:12px;color:#616e7c}
"""


def diff_html(diff: str, record: ExperimentRecord | None = None) -> str:
    if record is not None and record.imported is not None and not record.imported.diff_available:
        return (f"<p class='small'>(diff not available: commit {escape(record.imported.reference_commit)} is not in "
                "the checkout the night was imported from)</p>")
    if not diff.strip():
        return "<p class='small'>(no change)</p>"
    return f"<div class='diff'>{highlight(diff, DiffLexer(), HtmlFormatter(noclasses=True, nowrap=False))}</div>"


def _value(v) -> str:
    return f"{v:.6f}" if isinstance(v, (int, float)) else "-"


def cards(h: Headline, confirmation: Confirmation | None = None) -> str:
    unrecorded = "not recorded by the night"
    held = "not confirmed yet: `autoresearch confirm`"
    if confirmation is not None:
        kept = f" ({100 * confirmation.retention:.0f}%)" if confirmation.retention is not None else ""
        held = (f"gain on the holdout split no decision read, against {confirmation.search_gain:+.6f} searched{kept}"
                + (f"; {len(confirmation.warnings)} warning(s) below" if confirmation.warnings else ""))
    items = [
        (f"{_value(h.baseline)} → {_value(h.best)}", f"val_bpb, baseline → best ({h.gain_percent:.2f}% better)"),
        (f"{confirmation.holdout_gain:+.6f}" if confirmation else "-", held),
        (f"{h.experiments}", "experiments"),
        (f"{100 * h.keep_rate:.0f}%", f"keep rate ({h.keeps} kept besides the baseline)"),
        (", ".join(f"{k} {100 * v:.0f}%" for k, v in h.crash_rates.items()) or "none", "crash rate by class"),
        (f"{h.hours:.2f} h", "wall clock"),
        (unrecorded if h.imported else f"{100 * h.duty_cycle:.0f}%",
         "duty cycle (counted training seconds of all runs over the wall clock; start-up and evaluation left out)"),
        (unrecorded if h.imported and not h.tokens else f"{h.tokens:,} / ${h.cost_usd:.2f}", "LLM tokens / cost"),
        (f"{h.gain_per_gpu_hour:.4g}" if h.gain_per_gpu_hour is not None else "no GPU time recorded",
         f"val_bpb gained per {h.device}-hour ({h.gpu_hours:.2f} {h.device}-hours: every run's wall clock, one "
         f"{h.device} each)"),
        (f"{h.gain_per_usd:.4g}" if h.gain_per_usd is not None else "nothing spent",
         "val_bpb gained per dollar (" + (f"LLM ${h.cost_usd:.2f} + GPU ${h.gpu_cost_usd:.2f})" if
                                          h.gpu_cost_usd is not None else
                                          f"LLM ${h.cost_usd:.2f}; {h.device} time not priced: "
                                          "--gpu-usd-per-hour)")),
        (f"{h.sigma:.6f}" if h.sigma else "not measured", f"sigma of val_bpb between seeds; {h.confirmed} keep(s) "
                                                          "confirmed by a re-run"),
        ("; ".join(h.hardware) or "not recorded", "hardware the runs trained on"),
        *([("not FlashAttention-3", h.attention_fallback)] if h.attention_fallback else []),
        (f"{h.offset:+.6f}" if h.offset is not None else "not calibrated",
         f"best less this machine's calibrated baseline ({h.calibration.describe()})" if h.calibration else
         "best less this machine's baseline: `autoresearch calibrate --track TRACK` measures it"),
    ]
    return "<div class='cards'>" + "".join(
        f"<div class='card'><b>{escape(a)}</b><span>{escape(b)}</span></div>" for a, b in items) + "</div>"


def failed_proposals(failures: list) -> str:
    """Proposals that produced no experiment (agent.recording.proposal_failures.FailedProposal) and what they cost."""
    if not failures:
        return ""
    spent = sum(f.usage.cost_usd for f in failures)
    rows = "".join(f"<tr><td>{escape(f.experiment_id)}</td><td>{escape(f.kind)}</td>"
                   f"<td>${f.usage.cost_usd:.4f}</td><td>{escape(f.reason[:500])}</td></tr>"
                   for f in failures)
    return (f"<details><summary>{len(failures)} proposal(s) without an experiment, ${spent:.2f} (counted in the "
            f"cost cap)</summary><table><tr><th>for</th><th>kind</th><th>cost</th><th>reason</th></tr>{rows}"
            "</table></details>")


def kept_changes(records: list[ExperimentRecord]) -> str:
    """Every keep after the baseline with the one gain its rule compared (its runs' mean against the best's mean
    then) and every flag and gate it met."""
    parts = []
    for r in [r for r in records if r.status == ExperimentStatus.KEEP][1:]:
        runs, evidence = r.runs, r.evidence
        gain = (f"gain {evidence.gain:+.6f} against the best's mean of {len(evidence.best_runs or [])} run(s)"
                if evidence.gain is not None else "gain not recorded")
        how = (f"confirmed by {len(runs)} runs (seeds {', '.join(str(x.seed) for x in runs)})" if len(runs) > 1
               else f"one run, gain above {_value(evidence.threshold)}" if evidence.threshold
               else "one run") + (", verified from its saved weights" if r.verified else "")
        if r.kept_as == SIMPLIFY:
            how = f"kept as simplify: fewer lines for an equal result; {how}"
        if evidence.implausible_fall:
            how += f"; flagged: {evidence.implausible_fall}, and the holdout split confirmed it"
        config_html = ", ".join(f"{escape(str(k))}={escape(str(v))}" for k, v in r.architecture.items()) or "-"
        parts.append(
            f"<div class='change' id='keep-{escape(r.id)}'><b>{escape(r.id)}</b> "
            f"{escape(r.description)} — val_bpb {_value(r.val_bpb)} ({escape(gain)}, {escape(how)}) · "
            f"research program: {escape(program_name(r) or '-')} · "
            f"<a href='#t-{escape(r.id)}'>transcript</a>{verdict_html(r)}<div class='small'>model: {config_html}</div>"
            f"{diff_html(r.diff, r)}</div>")
    return "".join(parts) or "<p>No change beat the baseline yet.</p>"


def program_name(record: ExperimentRecord) -> str:
    return str(record.program.name) if record.program.name else "not recorded" if record.imported is not None else ""


def imported_html(imported: dict | None) -> str:
    return "".join(f"<div class='meta'>{escape(escape_controls(line, keep_newlines=False))}</div>"
                   for line in imported_lines(imported, results=False))


def tolerances_html(tolerances: Tolerances | None) -> str:
    if tolerances is None:
        return "<p>No run was verified against tolerances measured on this machine.</p>"
    return f"<p>The trusted evaluator's tolerances: {escape(tolerances.words())}.</p>"


def noise_and_holdout(records: list[ExperimentRecord], confirmation: Confirmation | None, track: str = "",
                      keep_rule: KeepRule | None = None) -> str:
    """The keep rule in words (the default settings' without keep_rule), the noise floors, the control runs of
    the best, the holdout confirmation."""
    keep_rule = keep_rule or KeepRule()
    floors = [r for r in records if r.status == ExperimentStatus.NOISE]
    warning = inflated_floor(floors[-1].sigma, track, keep_rule.keep_sigmas) if floors else None
    rows = "".join(
        f"<tr><td>{escape(r.of)}</td><td>{len(r.values or [])}</td><td>{_value(r.sigma)}</td>"
        f"<td>{', '.join(_value(v) for v in r.values or [])}</td></tr>" for r in floors)
    judged = [(len(r.evidence.best_runs or []) or 1, r.evidence.sigma) for r in records
              if r.is_experiment and r.evidence.gain is not None and r.imported is None]
    luck = expected_false_keeps_words(judged, keep_rule.keep_sigmas, keep_rule.min_delta)
    rule = f"<p>The keep rule: {escape(keep_rule.words())}. {escape(luck)}.</p>"
    if any(r.imported is not None for r in records):
        rule = ("<p>The imported experiments were kept or discarded by the night's own agent, on one run's val_bpb "
                f"each as the reference's program asks; this harness's keep rule ({escape(keep_rule.words())}) "
                "decides only the experiments run here.</p>")
    parts = [rule,
             f"<table><tr><th>best</th><th>runs</th><th>sigma</th><th>val_bpb of the runs</th></tr>{rows}</table>"
             if floors else "<p>No noise floor was measured (decisions compared single runs).</p>"]
    if warning:
        parts.append(f'<p class="warning">{escape(warning)}</p>')
    parts.append(controls_table(records))
    if confirmation is not None:
        base, best = confirmation.baseline, confirmation.best
        chain = confirmation.chain or [base, best]
        role = {base.id: "baseline ", best.id: "best "}
        parts.append(
            "<table><tr><th></th><th>searched val (mean of runs)</th><th>val, re-scored</th><th>holdout</th></tr>"
            + "".join(f"<tr><td>{escape(role.get(c.id, 'keep '))}{escape(c.id)}</td><td>{_value(c.search_val)}</td>"
                      f"<td>{_value(c.val)}</td><td>{_value(c.holdout)}</td></tr>" for c in chain)
            + f"<tr><td>gain</td><td>{confirmation.search_gain:+.6f}</td><td></td>"
              f"<td>{confirmation.holdout_gain:+.6f}</td></tr></table>"
            f"<p class='small'>holdout: text that no decision ever read, scored from the saved weights "
            f"({escape(confirmation.time)}).</p>"
            + "".join(f'<p class="warning">{escape(warning)}</p>' for warning in confirmation.warnings))
    else:
        parts.append("<p>Not confirmed on the holdout split yet: <code>autoresearch confirm --tag TAG</code>.</p>")
    return "".join(parts)


def controls_table(records: list[ExperimentRecord]) -> str:
    """Every control run of the best, a drift flagged as a warning: pooled into the best's runs when they agree
    with them (or a second shows the conditions changed), they keep decisions to the machine's conditions."""
    controls = [r for r in records if r.status == ExperimentStatus.CONTROL]
    if not controls:
        return ""
    rows = [f"<tr{' class=warning' if r.drift and r.drift.flagged else ''}><td>{escape(r.id)}</td>"
            f"<td>{_value(r.val_bpb)}</td><td>{_value(r.drift.earlier_mean if r.drift else None)}</td>"
            f"<td>{f'{r.drift.moved:+.6f}' if r.drift else '-'}</td>"
            f"<td>{'drift' if r.drift and r.drift.flagged else 'no'}</td><td>{escape(control_words(r))}</td></tr>"
            for r in controls]
    return ("<p>Control runs: the best re-run with a fresh seed on each new best and after experiments without a "
            "keep, pooled into the best's runs that decisions compare with when it agrees with them; one that "
            "disagrees is held back and the best re-measured.</p>"
            "<table><tr><th>control</th><th>val_bpb</th><th>best's earlier mean</th><th>moved</th>"
            f"<th>flagged</th><th>what it found</th></tr>{''.join(rows)}</table>")


def programs_table(records: list[ExperimentRecord]) -> str:
    rows = "".join(f"<tr><td>{escape(name)}</td><td>{count}</td><td>{kept}</td><td>{gain:.6f}</td></tr>"
                   for name, (count, kept, gain) in gains_by_program(records).items())
    return f"<table><tr><th>program</th><th>experiments</th><th>kept</th><th>val_bpb gained</th></tr>{rows}</table>"


def kinds_table(records: list[ExperimentRecord]) -> str:
    kinds = tally(records)
    if not kinds:
        return "<p>No experiment is labelled hyperparameter or algorithmic yet.</p>"
    rows = "".join(f"<tr><td>{escape(k.kind)}</td><td>{k.experiments}</td><td>{100 * k.share:.0f}%</td>"
                   f"<td>{k.keeps}</td><td>{100 * k.keep_rate:.0f}%</td><td>{_value(k.mean_gain)}</td></tr>"
                   for k in kinds)
    return ("<table><tr><th>kind</th><th>experiments</th><th>share</th><th>kept</th><th>keep rate</th>"
            f"<th>mean gain of keeps</th></tr>{rows}</table>")


def plateaus_list(records: list[ExperimentRecord]) -> str:
    """When each plateau happened (the experiment that ended it) and what the loop did."""
    items = "".join(f"<li><b>{escape(r.id)}</b> ({escape(r.finished or '')}): {escape(plateau_described(r))}</li>"
                    for r in plateaus(records))
    return f"<p>Plateaus:</p><ul>{items}</ul>" if items else "<p class='small'>No plateau.</p>"


def verdict_html(record: ExperimentRecord) -> str:
    """The test a decided experiment passed or failed, with its rule; "" where nothing was compared."""
    verdict = record_verdict(record)
    if verdict is None:
        return ""
    return (f"<div class='small verdict'>test: {escape(verdict.words())}"
            + (f"<br>rule: {escape(verdict.rule)}" if verdict.rule else "") + "</div>")


def reasoning_cell(record: ExperimentRecord, lessons: dict[str, str]) -> str:
    """The experiments table's cell: hypothesis, expected effect and lesson of one experiment."""
    why = reasoning(record, lessons, 600)
    parts = [(label, text) for label, text in (("hypothesis", why.hypothesis), ("expected", why.expected),
                                               ("lesson", why.lesson)) if text]
    return "".join(f"<div class='small'><b>{label}</b>: {escape(text)}</div>" for label, text in parts) or "-"


def learned_section(records: list[ExperimentRecord], notes: str) -> str:
    """Each experiment's hypothesis, expectation and lesson, the lessons of the keeps first, and the research notes
    as the night left them."""
    lessons = lessons_by_id(records)
    taught = [r for r in records if proposed(r) and r.id in lessons]
    keeps = [r for r in taught if r.status == ExperimentStatus.KEEP]
    rest = [r for r in taught if r.status != ExperimentStatus.KEEP]

    def rows(chosen: list[ExperimentRecord]) -> str:
        return "".join(f"<tr><td><a href='#t-{escape(r.id)}'>{escape(r.id)}</a></td>"
                       f"<td class='{escape(r.status)}'>{escape(r.kept_as)}</td><td>{escape(r.description)}"
                       f"</td><td>{reasoning_cell(r, lessons)}</td></tr>" for r in chosen)

    header = "<tr><th>id</th><th>status</th><th>change</th><th>hypothesis, expected, lesson</th></tr>"
    parts = []
    if keeps:
        parts.append(f"<h3>From the keeps</h3><table>{header}{rows(keeps)}</table>")
    if rest:
        parts.append(f"<details><summary>From the other {len(rest)} experiment(s)</summary><table>{header}"
                     f"{rows(rest)}</table></details>")
    if not parts:
        parts.append("<p>No lessons were recorded (an offline proposer, or the night is young).</p>")
    parts.append(f"<h3>Research notes</h3><pre class='notes'>{escape(notes)}</pre>" if notes.strip()
                 else "<h3>Research notes</h3><p>notes.md is empty.</p>")
    return "".join(parts)


def experiments_table(records: list[ExperimentRecord]) -> str:
    lessons = lessons_by_id(records)
    rows = "".join(
        f"<tr><td><a href='#t-{escape(r.id)}'>{escape(r.id)}</a></td>"
        f"<td class='{escape(r.status)}'>{escape(r.kept_as)}</td><td>{escape(r.novelty or '-')}</td>"
        f"<td>{_value(r.val_bpb)}</td><td class='small'>{escape(trained(r))}</td>"
        f"<td>{escape(r.triage_shown)}</td><td>{escape(where_ran(r) or '-')}</td>"
        f"<td>{escape(str(r.proposer or ''))}<div class='small'>{escape(program_name(r))}</div></td>"
        f"<td>{'-' if r.imported else f'${r.llm.cost_usd:.4f}'}</td>"
        f"<td>{escape(r.description)}<div class='small'>{escape(r.reason)}</div>{verdict_html(r)}</td>"
        f"<td>{reasoning_cell(r, lessons)}</td></tr>" for r in records)
    return ("<table><tr><th>id</th><th>status</th><th>kind</th><th>val_bpb</th><th>what it trained</th>"
            "<th>triage</th><th>ran on</th><th>proposer, program</th>"
            "<th>LLM $</th><th>description and decision</th><th>hypothesis, expected, lesson</th></tr>"
            f"{rows}</table>")


def compute_table(records: list[ExperimentRecord], constants: TrackConstants) -> str:
    """Each run's CPU and wall seconds up to its seal (agent/judging/compute.py), and the seconds a wall-clock
    track's own clock did not count, else its share of the baseline's cost on the same machine."""
    clocked = not constants.counted
    rows = []
    for r in records:
        for run in r.runs:
            if run.seal_seconds is None:
                continue
            if clocked:
                measured = uncounted(run, constants)
                share = "-" if measured is None else f"{measured:,.1f} s"
            else:
                costs = [value for entry in baseline_runs(records, run) if (value := spent(entry))]
                share = f"{spent(run) / statistics.median(costs):.2f}x" if costs and spent(run) else "-"
            rows.append(f"<tr><td>{escape(r.id)}</td><td>{escape(str(run.seed))}</td><td>{escape(run.triage or '-')}"
                        f"</td><td>{escape(run.device or '-')}</td><td>{_seconds(run.cpu_seconds)}</td>"
                        f"<td>{_seconds(run.seal_seconds)}</td><td>{share}</td></tr>")
    if not rows:
        return "<p>No run reached its seal.</p>"
    last = "uncounted (before its clock)" if clocked else "x the baseline's cost here"
    return ("<details><summary>What each run used before its seal, as the harness measured it</summary><table><tr>"
            f"<th>id</th><th>seed</th><th>triage</th><th>device</th><th>CPU s</th><th>wall s</th><th>{last}</th></tr>"
            f"{''.join(rows)}</table></details>")


def _seconds(value) -> str:
    return f"{value:,.1f}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def trained(record: ExperimentRecord) -> str:
    """Steps, training tokens (the seal's count where it made one), parameters, tok/s, MFU and peak memory of an
    experiment's run: what a change bought with its budget, which its name may hide."""
    said, tokens = record.summary, next((run.trained_tokens for run in record.runs if run.trained_tokens), None)
    speed, peak = summary_number(said.get("tokens_per_second")), summary_number(said.get("peak_vram_mb"))
    parts = [f"{said['num_steps']} steps" if said.get("num_steps") else None,
             f"{tokens / 1e6:.2f}M tokens" if tokens else (f"{said['total_tokens_M']}M tokens"
                                                            if said.get("total_tokens_M") else None),
             f"{said['num_params_M']}M params" if said.get("num_params_M") else None,
             f"{speed:,.0f} tok/s" if speed else None,
             f"MFU {said['mfu_percent']}%" if said.get("mfu_percent") else None,
             f"{peak:,.0f} MB peak" if peak else None]
    return " · ".join(part for part in parts if part) or "-"


def returns_html(night: Returns, device: str) -> str:
    """Each keep's marginal cost (device-hours and LLM dollars since the keep before it, per unit of val_bpb it
    moved the best), and the fitted curve's projection of what more of the night would buy."""
    if not night.keeps:
        return "<p>No keep moved the best, so nothing was bought.</p>"
    rows = "".join(
        f"<tr><td><a href='#keep-{escape(k.id)}'>{escape(k.id)}</a></td><td>{k.moved:.6f}</td>"
        f"<td>{k.gain_so_far:.6f}</td><td>{k.device_hours:.3f}</td><td>${k.usd:.2f}</td>"
        f"<td>{k.device_hours_since:.3f}</td><td>${k.usd_since:.2f}</td>"
        f"<td>{f'{k.device_hours_per_gain:.3g}' if k.device_hours_per_gain is not None else '-'}</td></tr>"
        for k in night.keeps)
    first, last = night.keeps[0].device_hours_per_gain, night.keeps[-1].device_hours_per_gain
    trend = (f"<p>The last keep cost {last / first:.1f}x the {device}-hours per unit of gain of the first.</p>"
             if first and last and len(night.keeps) > 1 else "")
    p = night.projection
    projected = (f"<p>Projected returns ({escape(MODEL)}): the curve levels off at a gain of {p.ceiling:.6f} "
                 f"(tau {p.tau_hours:.3g} {device}-hours); the night spent {p.hours:.3f} {device}-hours and as many "
                 f"again would add about {p.next_as_long:.6f}.</p>" if p else
                 f"<p class='small'>No projection: {escape(night.why_not)}.</p>")
    return (f"<table><tr><th>keep</th><th>moved the best by</th><th>gain so far</th><th>{device}-hours so far</th>"
            f"<th>LLM $ so far</th><th>{device}-hours since the keep before</th><th>LLM $ since</th>"
            f"<th>{device}-hours per unit of val_bpb</th></tr>{rows}</table>{trend}{projected}")


def time_html(went: TimeWent | None, png: bytes | None) -> str:
    if went is None:
        return "<p>No stamped event was recorded.</p>"
    named = {"training": "training (a run in at least one slot, start-up and evaluation included)"}
    rows = "".join(f"<tr><td>{escape(named.get(phase, phase))}</td><td>{seconds:,.0f}</td>"
                   f"<td>{100 * went.share(seconds):.0f}%</td></tr>"
                   for phase, seconds in [*went.phases.items(), ("nothing running", went.idle_s)])
    image = (f"<img class='plot' alt='time line' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
             if png else "")
    return (f"{image}<table><tr><th>phase</th><th>seconds (phases overlap)</th><th>share of the wall clock "
            f"({went.wall_s:,.0f} s)</th></tr>{rows}</table>")


def curves_html(records: list[ExperimentRecord], found: dict[str, Curve]) -> str:
    colour = {ExperimentStatus.KEEP: "#1f9d55", ExperimentStatus.DISCARD: "#3182ce"}
    cells = []
    for r in records:
        if r.id not in found or r.proposer == "baseline":
            continue
        best = compared_with(r, records)
        svg = curve_svg(found[r.id], found.get(best.id, []) if best else [], colour.get(r.status, "#d64545"))
        cells.append(f"<div class='change curvecell'><b>{escape(r.id)}</b> <span class='{escape(r.status)}'>"
                     f"{escape(r.kept_as)}</span> <span class='small'>{escape(r.description[:70])} · against "
                     f"{escape(best.id) if best else 'nothing'}</span><br>{svg}</div>")
    if not cells:
        return "<p>No log had step lines to draw.</p>"
    return ("<p class='small'>Training loss against the share of the budget spent; dashed: the best the experiment "
            "was compared with. Read from the runs' logs, for reading only.</p>"
            f"<div class='curves'>{''.join(cells)}</div>")


def in_flight_section(night: Night) -> str:
    """The experiments still running when the report was written (mid-night), each with what it was doing, and
    the conversations open then, each proposing an experiment not committed yet."""
    in_flight, doing = night.in_flight, {}
    for phase, line in night.phases:
        doing.setdefault(phase.experiment_id, []).append(line)
    committed = {m.id for m in in_flight}
    proposing = {key: lines for key, lines in doing.items() if key not in committed
                 and any(" proposing " in line for line in lines)}
    if not in_flight and not proposing:
        return ""
    rows = "".join(f"<tr><td>{escape(m.id)}</td><td>{escape(m.started or '')}</td><td>{escape(m.description)}</td>"
                   f"<td>{'<br>'.join(escape(line) for line in doing.get(m.id, [])) or '-'}</td></tr>"
                   for m in in_flight)
    rows += "".join(f"<tr><td>{escape(key)}</td><td>-</td><td>(being proposed)</td>"
                    f"<td>{'<br>'.join(escape(line) for line in lines)}</td></tr>"
                    for key, lines in sorted(proposing.items()))
    open_ = f", and {len(proposing)} conversation(s) open, each proposing one" if proposing else ""
    return (f"<h2>In flight when this report was written ({len(in_flight)}){open_}"
            f"</h2><table><tr><th>id</th><th>started</th><th>change</th><th>doing</th></tr>{rows}</table>")


def event_html(e: dict) -> str:
    kind = e.get("type", "")
    at = escape(str(e.get("t", "")))
    if kind == "thinking":
        return (f"<div class='event thinking'><div class='small'>thinking · {at}</div>"
                f"<pre>{escape(str(e.get('text', '')))}</pre></div>")
    if kind in ("assistant", "reasoning"):
        usage = e.get("usage") or {}
        tokens = (f" · {usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out, "
                  f"${usage.get('cost_usd', 0):.4f}") if usage else ""
        return (f"<div class='event assistant'><div class='small'>{escape(kind)} · {at}{escape(tokens)}</div>"
                f"<pre>{escape(e.get('text') or '(no text)')}</pre></div>")
    if kind == "tool_call":
        arguments = escape(json.dumps(e.get("arguments", {}), indent=2))
        return (f"<details class='event tool'><summary>tool call <b>{escape(str(e.get('name')))}</b></summary>"
                f"<pre>{arguments}</pre></details>")
    if kind == "tool_result":
        css, label = ("event error", "tool error") if e.get("is_error") else ("event tool", "tool result")
        return (f"<details class='{css}'><summary>{label} {escape(str(e.get('name')))}</summary>"
                f"<pre>{escape(str(e.get('content', '')))}</pre></details>")
    if kind == "committed":
        return f"<div class='event'><div class='small'>committed {escape(str(e.get('commit', ''))[:7])}</div></div>"
    if kind == "decision":
        evidence = e.get("evidence") or {}
        runs = ", ".join(f"seed {r.get('seed')}: {_value(r.get('val_bpb'))}"
                         + (" salvaged" if r.get("salvaged") else "")
                         + (f" on {r['where']}" if r.get("where") else "") for r in e.get("runs") or [])
        rule = (f"rule: {evidence['rule']} · sigma {_value(evidence.get('sigma'))} · gain "
                f"{_value(evidence.get('gain'))} · threshold {_value(evidence.get('threshold'))}"
                if evidence.get("rule") else "")
        return (f"<div class='event decision'>decision: {escape(str(e.get('status')))} "
                f"({escape(str(e.get('triage')))}) — {escape(str(e.get('reason')))}"
                f"<div class='small'>{escape(runs)}{' · ' if runs and rule else ''}{escape(rule)}</div></div>")
    if kind == "llm_request":
        return (f"<details class='event'><summary>request to {escape(str(e.get('provider')))}:"
                f"{escape(str(e.get('model')))} under program {escape(str(e.get('program')))} "
                f"(system {escape(str(e.get('system_sha256', ''))[:12])})</summary>"
                f"<pre>{escape(str(e.get('user', '')))}</pre></details>")
    fields = {k: v for k, v in e.items() if k not in ("v", "t", "type", "log_tail", "summary", "diff")}
    said = EVENT_WORDS[kind](e) if kind in EVENT_WORDS else ", ".join(
        f"{k.replace('_', ' ')} {v}" for k, v in fields.items() if isinstance(v, str | int | float | bool))
    return (f"<div class='event small'><b>{escape(kind.replace('_', ' '))}</b> · {at} · {escape(said[:600])}"
            f"<details><summary>JSON</summary><pre>{escape(json.dumps(fields, default=str, indent=1)[:4000])}</pre>"
            "</details></div>")


def _run_finished(e: dict) -> str:
    return (f"seed {e.get('seed')}: {e.get('triage')} ({e.get('reason')}) after {_seconds(e.get('seconds'))} s"
            + (f" on {e['where']}" if e.get("where") else "") + (", salvaged from its sealed weights"
                                                                  if e.get("salvaged") else ""))


def _verification(e: dict) -> str:
    checks = "; ".join(f"seed {c.get('seed')}: printed {_value(c.get('printed'))}, trusted {_value(c.get('trusted'))}"
                       for c in e.get("checks") or [] if isinstance(c, dict))
    return (("passed" if e.get("passed") else f"failed: {e.get('problem')}") + (f" ({checks})" if checks else "")
            + f", {_seconds(e.get('verify_s'))} s")


EVENT_WORDS = {
    "run_started": lambda e: f"seed {e.get('seed')} on the {e.get('runner')} runner, killed after "
                             f"{_seconds(e.get('timeout_s'))} s",
    "run_finished": _run_finished,
    "proposal": lambda e: f"{e.get('proposer')}: {e.get('description')} ({len(e.get('edits') or [])} edit(s))",
    "proposal_started": lambda e: f"{e.get('proposer')} proposing on {str(e.get('parent'))[:7]} under program "
                                  f"{e.get('program')}",
    "verification": _verification,
    "rerun": lambda e: f"again with seed {e.get('seed')}: {e.get('reason')}",
    "noise_floor_started": lambda e: f"{e.get('runs')} more run(s) of {e.get('of')}",
    "noise_floor": lambda e: f"sigma {_value(e.get('sigma'))} from {', '.join(map(_value, e.get('values') or []))}",
}


def transcripts(records: list[ExperimentRecord], events_by_id: dict[str, list[dict]]) -> str:
    return "".join(f"<details class='transcript' id='t-{escape(r.id)}'><summary><b>{escape(r.id)}</b> "
                   f"<span class='{escape(r.status)}'>{escape(r.status)}</span> {escape(r.description)}</summary>"
                   + ("".join(event_html(e) for e in events_by_id.get(r.id, [])) or "<p class='small'>(none)</p>")
                   + "</details>" for r in records)


def data_said(track: FrozenTrack) -> str:
    return track.fingerprint[:12] if track.fingerprint else "not prepared here"


def page(night: Night, plot_png: bytes, timeline: bytes | None) -> str:
    plot = base64.b64encode(plot_png).decode()
    generated = time.strftime("%Y-%m-%d %H:%M")
    tag, track, records, h = night.tag, night.track, night.records, night.headline
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>autoresearch report: {escape(tag)}</title>
<style>{STYLE}</style></head><body>
<h1>{escape(tag)}</h1>
<div class="meta">track {escape(track.track)} · data {escape(data_said(track))}
 · generated {generated} · <a href="report.json">the data as JSON</a></div>{imported_html(night.imported)}
{cards(h, night.confirmation)}{failed_proposals(night.failures)}{in_flight_section(night)}
<img class="plot" alt="progress of {escape(tag)}" src="data:image/png;base64,{plot}">
<h2>Kept changes</h2>{kept_changes(records)}
<h2>What the night bought and what it cost</h2>{returns_html(night.returns, h.device)}
<h2>Where the time went</h2>{time_html(night.time_went, timeline)}
<h2>What we learned</h2>{learned_section(records, night.notes)}
<h2>Noise and held-out confirmation</h2>
{noise_and_holdout(records, night.confirmation, track.track, night.keep_rule)}
{tolerances_html(night.tolerances)}
<h2>Hyperparameter or algorithmic</h2>{kinds_table(records)}
<h2>Programs</h2>{programs_table(records)}{plateaus_list(records)}
<h2>Every experiment</h2>{experiments_table(records)}
{compute_table(records, track.constants)}
<h2>Loss curves</h2>{curves_html(records, night.curves)}
<h2>Baseline to best</h2>{diff_html(night.cumulative_diff)}
<h2>Transcripts</h2>{transcripts(records, night.events)}
</body></html>
"""


def comparison_page(headlines: dict[str, Headline], plot_png: bytes) -> str:
    rows = "".join(f"<tr><td>{escape(tag)}</td><td>{escape('; '.join(h.hardware) or '-')}</td>"
                   f"<td>{_value(h.baseline)}</td><td>{_value(h.best)}</td>"
                   f"<td>{_value(h.calibration.mean if h.calibration else None)}</td>"
                   f"<td>{f'{h.offset:+.6f}' if h.offset is not None else '-'}</td>"
                   f"<td>{h.gain_percent:.2f}%</td><td>{h.experiments}</td><td>{100 * h.keep_rate:.0f}%</td>"
                   f"<td>${h.spent_usd:.2f}</td>"
                   f"<td>{f'{h.gain_per_usd:.4g}' if h.gain_per_usd is not None else '-'}</td></tr>"
                   for tag, h in headlines.items())
    plot = base64.b64encode(plot_png).decode()
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>autoresearch: runs compared</title><style>{STYLE}</style>
</head><body><h1>Runs compared</h1>
<img class="plot" alt="runs compared" src="data:image/png;base64,{plot}">
<p>Machines compare by offset: each best less the calibrated baseline of the machine it trained on
(`autoresearch calibrate`), not by val_bpb itself.</p>
<table><tr><th>tag</th><th>hardware</th><th>baseline</th><th>best</th><th>calibrated baseline</th><th>offset</th>
<th>gain</th><th>experiments</th><th>keep rate</th><th>spent $ (LLM, and GPU where priced)</th>
<th>val_bpb per $</th></tr>{rows}</table></body></html>
"""
