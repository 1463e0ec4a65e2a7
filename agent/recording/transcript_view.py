"""A transcript rendered for a person in the terminal (rich)."""

from __future__ import annotations

import json

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from agent.untrusted import escape_controls

LONG = 2000


def render(events: list[dict], experiment_id: str) -> RenderableType:
    return Group(Text(f"experiment {experiment_id}", style="bold"), *(_event(e) for e in events))


def _clip(text: str, limit: int = LONG) -> str:
    text = escape_controls(str(text))
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


def _event(e: dict) -> RenderableType:
    kind, at = e.get("type", "?"), e.get("t", "")
    title = f"{escape(_clip(kind, 80))}  [dim]{escape(_clip(at, 80))}[/dim]"
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
    if kind == "decision":
        evidence = e.get("evidence") or {}
        runs = ", ".join(f"seed {r.get('seed')}: {r.get('val_bpb')}" + (" salvaged" if r.get("salvaged") else "")
                         for r in e.get("runs") or [])
        detail = (f"\nruns: {runs}" if runs else "") + (
            f"\nrule: {evidence['rule']}; sigma {evidence.get('sigma')}, gain {evidence.get('gain')}, "
            f"threshold {evidence.get('threshold')}" if evidence.get("rule") else "")
        return Panel(Text(_clip(f"{e.get('status')} ({e.get('triage')}): {e.get('reason')}{detail}")), title=title,
                     border_style="bold green" if e.get("status") == "keep" else "bold red")
    fields = {k: v for k, v in e.items() if k not in ("v", "t", "type")}
    return Text(f"{kind}: {_clip(json.dumps(fields, default=str), 600)}", style="dim")
