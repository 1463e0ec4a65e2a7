"""What a notification says: one typed model per event, the text a person reads and the numbers beside it. Only
the ledger's own numbers and the experiment's description (bounded) go in, never a run's log nor a value of the
environment: a description that holds such a value has it replaced (secrets_out)."""

from __future__ import annotations

import os
import re
from enum import Enum

from pydantic import BaseModel

from agent.report.summary import Headline
from agent.untrusted import bounded

DESCRIPTION_CHARS = 200
REASON_CHARS = 300
# Environment variables whose values are secrets wherever they appear (API keys, tokens, passwords).
SECRET_NAMES = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|WEBHOOK", re.IGNORECASE)
SHORTEST_SECRET = 8  # shorter values would replace ordinary words


class Event(str, Enum):
    KEEP = "keep"
    CRASH_STREAK = "crash_streak"
    PLATEAU = "plateau"
    ATTENTION_FALLBACK = "attention_fallback"
    STOPPED = "stopped"
    NIGHT_ENDED = "night_ended"


class Notification(BaseModel):
    """One notification; the generic JSON body is this model as it is."""
    event: Event
    tag: str
    title: str
    text: str
    experiment: str | None = None     # the experiment's id
    val_bpb: float | None = None      # the kept experiment's
    best: float | None = None         # the best val_bpb after the event
    gain: float | None = None         # keep: over the previous best; night_ended: over the baseline
    streak: int | None = None         # crash_streak and plateau: experiments in a row
    reason: str | None = None         # stopped: why
    experiments: int | None = None    # night_ended: the tag's experiments, keeps and spend
    keeps: int | None = None
    cost_usd: float | None = None     # night_ended: LLM spend, and GPU time where priced
    gain_per_usd: float | None = None
    report: str | None = None         # night_ended: the report's path


def secrets_out(text: str) -> str:
    for name, value in os.environ.items():
        if len(value) >= SHORTEST_SECRET and SECRET_NAMES.search(name) and value in text:
            text = text.replace(value, f"[${name}]")
    return text


def _said(text: str, limit: int) -> str:
    return bounded(secrets_out(text), limit)


def keep(tag: str, experiment: str, description: str, val_bpb: float, previous_best: float | None) -> Notification:
    gain = previous_best - val_bpb if previous_best is not None else None
    described = _said(description, DESCRIPTION_CHARS)
    return Notification(event=Event.KEEP, tag=tag, title=f"{tag}: new best {val_bpb:.6f}", experiment=experiment,
                        val_bpb=val_bpb, best=val_bpb, gain=gain,
                        text=f"{tag}: kept {experiment} ({described}): val_bpb {val_bpb:.6f}"
                             + (f", {gain:.6f} better than the previous best" if gain is not None else ""))


def crash_streak(tag: str, experiment: str, streak: int, best: float | None) -> Notification:
    return Notification(event=Event.CRASH_STREAK, tag=tag, title=f"{tag}: {streak} crashes in a row",
                        experiment=experiment, streak=streak, best=best,
                        text=f"{tag}: {streak} experiments in a row crashed (the last {experiment}); the loop goes "
                             "on from the best")


def plateau(tag: str, experiment: str, streak: int, what: str, best: float | None) -> Notification:
    return Notification(event=Event.PLATEAU, tag=tag, title=f"{tag}: plateau", experiment=experiment, streak=streak,
                        best=best, text=f"{tag}: plateau: {_said(what, REASON_CHARS)}")


def stopped(tag: str, why: str, best: float | None) -> Notification:
    reason = _said(why, REASON_CHARS)
    return Notification(event=Event.STOPPED, tag=tag, title=f"{tag}: stopped", reason=reason, best=best,
                        text=f"{tag}: the loop stopped: {reason}")


def night_ended(tag: str, h: Headline, report: str) -> Notification:
    """The night's end in the numbers of its report (the read model's headline)."""
    best_said = (f"best val_bpb {h.best:.6f} ({h.gain:.6f} better than the baseline)" if h.best is not None
                 else "no best")
    per_usd = f" ({h.gain_per_usd:.4g} val_bpb per $)" if h.gain_per_usd is not None else ""
    return Notification(event=Event.NIGHT_ENDED, tag=tag, title=f"{tag}: night ended", experiments=h.experiments,
                        keeps=h.keeps, best=h.best, gain=h.gain, cost_usd=h.spent_usd, gain_per_usd=h.gain_per_usd,
                        report=report, text=f"{tag}: night ended: {h.experiments} experiment(s), {h.keeps} keep(s), "
                                            f"{best_said}, spent ${h.spent_usd:.2f}{per_usd}; report: {report}")


def attention_fallback(tag: str, experiment: str, why: str, best: float | None) -> Notification:
    return Notification(event=Event.ATTENTION_FALLBACK, tag=tag, title=f"{tag}: trained without FlashAttention-3",
                        experiment=experiment, best=best,
                        text=f"{tag}: experiment {experiment} {_said(why, REASON_CHARS)}; later runs on this machine "
                             "will too, slower than the reference and not comparable to its numbers")
