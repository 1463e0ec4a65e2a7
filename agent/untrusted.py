"""Text that came from a model or a run, made safe to store and to show.

Descriptions, reasons, log lines and printed summaries are written by train.py or by the
proposer, so they can hold anything: terminal escape sequences, NUL, right-to-left overrides,
rich markup such as ``[/b]``, or megabytes on one line. Everything shown in the terminal goes
through ``shown`` (a rich Text, never parsed as markup, control characters escaped); what is
stored goes through ``bounded``.
"""

from __future__ import annotations

from rich.text import Text

from trainer.run_log import escape_controls

__all__ = ["bounded", "clip", "escape_controls", "shown"]

DESCRIPTION_CHARS = 500      # a description is one line in results.tsv and the terminal


def clip(text: str, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"


def bounded(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """One line of at most about `limit` characters with no control characters left raw."""
    return clip(escape_controls(" ".join(str(text).split()), keep_newlines=False), limit)


def shown(text: str, limit: int = 2000, style: str = "") -> Text:
    """A rich Text of untrusted text: markup is not interpreted, controls are escaped, length clipped."""
    return Text(clip(escape_controls(text), limit), style=style)
