"""A run's log as the proposer sees it: its last lines, bounded and with control characters escaped.
Reading the log itself (bounded, whatever its size) is trainer/run_log.py's."""

from __future__ import annotations

from pathlib import Path

from trainer.run_log import LogView, escape_controls, read_log

__all__ = ["LogView", "last_lines", "prompt_tail", "read_log"]


def last_lines(path: Path, count: int) -> str:
    """The last `count` lines of a log, from its last TAIL_BYTES at most."""
    lines = read_log(path).text.splitlines()
    return "\n".join(lines[-count:])


def prompt_tail(log_tail: str, lines: int, chars: int = 8000) -> str:
    """The end of a log for a prompt: at most `lines` lines and `chars` characters, controls escaped."""
    text = "\n".join(log_tail.splitlines()[-lines:])
    return escape_controls(text if len(text) <= chars else "[...]" + text[-chars:])
