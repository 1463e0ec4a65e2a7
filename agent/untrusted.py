"""Text that came from a model or a run, made safe to store and to show.

Descriptions, reasons, log lines and printed summaries are written by train.py or by the
proposer, so they can hold anything: terminal escape sequences, NUL, right-to-left overrides,
rich markup such as ``[/b]``, or megabytes on one line. Everything shown in the terminal goes
through ``shown`` (a rich Text, never parsed as markup, control characters escaped); what is
stored goes through ``bounded``.
"""

from __future__ import annotations

import re

from rich.text import Text

DESCRIPTION_CHARS = 500      # a description is one line in results.tsv and the terminal
# C0 and C1 controls (ESC, NUL, ...) and the bidirectional overrides and isolates that reorder a line.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str, keep_newlines: bool = True) -> str:
    """text with every control and bidi-override character written as a visible escape (\\x1b, \\u202e)."""
    def visible(match: re.Match) -> str:
        code = ord(match.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    escaped = _CONTROLS.sub(visible, str(text))
    return escaped if keep_newlines else escaped.replace("\n", "\\n").replace("\t", " ")


def clip(text: str, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"


def bounded(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """One line of at most about `limit` characters with no control characters left raw."""
    return clip(escape_controls(" ".join(str(text).split()), keep_newlines=False), limit)


def shown(text: str, limit: int = 2000, style: str = "") -> Text:
    """A rich Text of untrusted text: markup is not interpreted, controls are escaped, length clipped."""
    return Text(clip(escape_controls(text), limit), style=style)
