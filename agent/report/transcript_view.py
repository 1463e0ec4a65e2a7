"""A transcript rendered for a person in the terminal (rich): one panel per step of the experiment. All of it came
from a model or a run: it is clipped, and reaches the terminal as text, never as markup."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from agent.recording.record import Evidence
from agent.recording.transcript import Transcript
from agent.report.verdict import verdict_of
from agent.untrusted import escape_controls

LONG = 2000
ENDED = ("decision", "interrupted")   # an experiment's transcript ends with one of these


def render(events: list[dict], experiment_id: str) -> RenderableType:
    return Group(Text(f"experiment {experiment_id}", style="bold"), *panels(events))


def panels(events: list[dict], settled: bool = False) -> list[RenderableType]:
    """The events grouped into what a reader follows: a proposal with its commit, a run's start with its end.
    settled: without the panels that more events may still complete (a run not finished, a proposal not committed),
    so that the panels of a transcript that grows only ever grow at their end."""
    out: list[RenderableType] = []
    proposal: dict | None = None
    asked: dict | None = None       # proposal_started: what the proposal was asked against
    started: dict = {}              # seed -> its run_started event, until its run_finished
    before_run: list[dict] = []     # a re-run's reason and retries, shown with the run they are about
    for e in events:
        kind = e.get("type")
        if kind == "proposal_started":
            asked = e
            continue
        if kind == "proposal":
            proposal = e
            continue
        if kind == "committed" and proposal is not None:
            out.append(_proposal(proposal, e, asked))
            proposal = asked = None
            continue
        if kind == "run_started":
            started[e.get("seed")] = e
        elif kind in ("rerun", "retry"):
            before_run.append(e)
        elif kind == "run_finished":
            start = started.pop(e.get("seed"), None) or (started.pop(next(iter(started))) if started else None)
            out.append(_run(start, e, before_run))
            before_run = []
        else:
            out.append(_event(e))
    if settled:
        return out
    out.extend(_run(start, None, before_run) for start in started.values())  # runs that never finished
    if proposal is not None:
        out.append(_proposal(proposal, None, asked))
    elif asked is not None:  # a proposal that never came
        out.append(_event(asked))
    return out


def follow(transcripts: Path, experiment: str | None, show: Callable[[RenderableType], None],
           interval: float = 1.0, running: Callable[[], bool] = lambda: True) -> None:
    """Shows an experiment's panels as its transcript grows, until its decision; without an id, the latest
    experiment's, then each newer one's as it starts, until the night is not running (or the reader stops it)."""
    path, count, ended, waiting = None, 0, False, False
    while True:
        named = {p.stem: p for p in sorted(transcripts.glob("*.jsonl"))}
        if experiment is not None:
            stem = experiment if path is None else None
        elif path is None:
            stem = next(reversed(named), None)
        else:
            stem = next((s for s in named if s > path.stem), None) if ended else None
        if stem in named:
            path, count, ended = named[stem], 0, False
            show(Text(f"experiment {stem}", style="bold"))
        if path is not None:
            events = Transcript(path).events()
            ended = any(e.get("type") in ENDED for e in events)
            shown = panels(events, settled=not ended)
            for panel in shown[count:]:
                show(panel)
            count = len(shown)
            if ended and experiment is not None:
                return
        if (path is None or ended) and experiment is None:
            if not running():
                show(Text("the night is not running: nothing more to follow", style="dim"))
                return
            if not waiting:
                show(Text("waiting for the next experiment (Ctrl-C to stop)", style="dim"))
                waiting = True
        else:
            waiting = False
        time.sleep(interval)


def _clip(text: str, limit: int = LONG) -> str:
    text = escape_controls(str(text))
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


def _title(name: str, e: dict | None) -> str:
    return f"{escape(_clip(name, 200))}  [dim]{escape(_clip((e or {}).get('t', ''), 80))}[/dim]"


def _proposal(proposal: dict, committed: dict | None, asked: dict | None) -> Panel:
    lines = [f"{label}: {proposal[key]}" for label, key in (
        ("proposer", "proposer"), ("change", "description"), ("hypothesis", "hypothesis"),
        ("expected", "expected")) if proposal.get(key)]
    if asked is not None:
        lines.append(f"asked against {str(asked.get('parent', ''))[:7]} under program {asked.get('program')}"
                     + (f", while {', '.join(map(str, asked['while_running']))} ran" if asked.get("while_running")
                        else ""))
    parts: list[RenderableType] = [Text(_clip("\n".join(lines)))]
    if committed is not None:
        parts.append(Text(f"committed {_clip(str(committed.get('commit', ''))[:7], 7)}", style="dim"))
        if committed.get("diff"):
            parts.append(Syntax(_clip(committed["diff"], 20000), "diff", word_wrap=True))
    return Panel(Group(*parts), title=_title("proposal", proposal), border_style="blue")


def _run(start: dict | None, finished: dict | None, before: list[dict]) -> Panel:
    seed = (start or finished or {}).get("seed")
    lines = [f"re-run: {e.get('reason')}" if e.get("type") == "rerun" else f"retried: {e.get('reason')}"
             for e in before]
    if start is not None:
        lines.append(f"seed {seed}, commit {str(start.get('commit', ''))[:7]}, runner {start.get('runner')}, "
                     f"timeout {start.get('timeout_s')} s")
    if finished is None:
        lines.append("no end recorded (still running, or the loop stopped)")
        style = "yellow"
    else:
        summary = finished.get("summary") or {}
        printed = summary.get("val_bpb") if isinstance(summary, dict) else None
        lines.append(f"printed val_bpb {printed if printed is not None else '-'}, triage {finished.get('triage')}, "
                     f"{finished.get('seconds')} s" + (f" on {finished['where']}" if finished.get("where") else ""))
        if finished.get("triage") != "ok" and finished.get("reason"):
            lines.append(f"why: {finished.get('reason')}")
        style = "green" if finished.get("triage") == "ok" else "red"
    return Panel(Text(_clip("\n".join(lines))), title=_title(f"run, seed {seed}", start or finished),
                 border_style=style)


def _number(value, spec: str = ".6f") -> str:
    """A number as a reader wants it (six places, or three figures for a gap), anything else as it came."""
    return format(value, spec) if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def _verification(e: dict) -> Panel:
    passed = e.get("passed")
    lines = ["passed: the trusted evaluator's scores stand" if passed else f"failed: {e.get('problem')}"]
    for check in e.get("checks") or []:
        if isinstance(check, dict):
            lines.append(f"seed {check.get('seed')}: printed {_number(check.get('printed'))}, trusted "
                         f"{_number(check.get('trusted'))}, gap {_number(check.get('gap'), '.3g')} (tolerance "
                         f"{_number(check.get('tolerance'), '.3g')})")
    return Panel(Text(_clip("\n".join(lines))), title=_title("verification", e),
                 border_style="green" if passed else "red")


def _decision(e: dict) -> Panel:
    runs = ", ".join(f"seed {r.get('seed')}: {r.get('val_bpb')}" + (" salvaged" if r.get("salvaged") else "")
                     for r in e.get("runs") or [] if isinstance(r, dict))
    lines = [f"{e.get('status')} ({e.get('triage')}): {e.get('reason')}"] + ([f"runs: {runs}"] if runs else [])
    try:
        evidence = Evidence.model_validate(e.get("evidence") or {})
        verdict = verdict_of(evidence, e.get("status"), e.get("triage"))
    except (ValidationError, ValueError):
        evidence, verdict = None, None
    if verdict is not None:
        lines.append(f"test: {verdict.words()}")
    if evidence is not None and evidence.rule:
        lines.append(f"rule: {evidence.rule}")
    return Panel(Text(_clip("\n".join(lines))), title=_title("decision", e),
                 border_style="bold green" if e.get("status") == "keep" else "bold red")


def _event(e: dict) -> RenderableType:
    kind, at = e.get("type", "?"), e.get("t", "")
    title = _title(str(kind), e)
    if kind == "llm_request":
        about = _clip(f"request to {e.get('provider')}:{e.get('model')} (program {e.get('program')}, system "
                      f"{str(e.get('system_sha256', ''))[:12]})", 300)
        return Panel(Text(_clip(e.get("user", ""))), title=f"{escape(about)}  [dim]{escape(_clip(at, 80))}[/dim]")
    if kind == "thinking":
        return Panel(Text(_clip(e.get("text", "")), style="italic"), title=title, border_style="magenta")
    if kind in ("assistant", "reasoning"):
        usage = e.get("usage")
        extra = f"  tokens in {usage['input_tokens']} out {usage['output_tokens']}, ${usage['cost_usd']:.4f}" \
            if usage else ""
        if usage and (usage.get("cache_read_tokens") or usage.get("cache_write_tokens")):
            extra += f" (cache read {usage.get('cache_read_tokens', 0)}, written {usage.get('cache_write_tokens', 0)})"
        if e.get("service_model"):
            extra += f"  [dim]{escape(str(e['service_model']))} {escape(str(e.get('request_id') or ''))} " \
                     f"{escape(str(e.get('stop_reason') or ''))}[/dim]"
        return Panel(Text(_clip(e.get("text", "")) or "(no text)"), title=title + extra, border_style="cyan")
    if kind == "tool_call":
        return Panel(Syntax(json.dumps(e.get("arguments", {}), indent=2), "json", word_wrap=True),
                     title=f"tool call {escape(_clip(e.get('name'), 80))}  [dim]{escape(_clip(at, 80))}[/dim]",
                     border_style="yellow")
    if kind == "tool_result":
        style = "red" if e.get("is_error") else "green"
        return Panel(Text(_clip(e.get("content", ""), 1200)), title=f"tool result {escape(_clip(e.get('name'), 80))}",
                     border_style=style)
    if kind == "committed" and e.get("diff"):
        return Panel(Syntax(_clip(e["diff"], 20000), "diff", word_wrap=True),
                     title=f"committed {escape(str(e.get('commit', ''))[:7])}")
    if kind == "verification":
        return _verification(e)
    if kind == "decision":
        return _decision(e)
    fields = {k: v for k, v in e.items() if k not in ("v", "t", "type")}
    return Text(f"{kind}: {_clip(json.dumps(fields, default=str), 600)}", style="dim")
