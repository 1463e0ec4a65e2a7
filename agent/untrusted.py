"""Text that came from a model or a run, made safe to store and to show.

Descriptions, reasons, log lines and printed summaries are written by train.py or by the
proposer, so they can hold anything: terminal escape sequences, NUL, right-to-left overrides,
rich markup such as ``[/b]``, or megabytes on one line. Everything shown in the terminal goes
through ``shown`` (a rich Text, never parsed as markup, control characters escaped); what is
stored goes through ``bounded``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from rich.text import Text

from trainer.runs.run_log import escape_controls

__all__ = ["NotPlainFile", "bounded", "clip", "escape_controls", "plain_file", "shown"]

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


class NotPlainFile(ValueError):
    """A file a stranger left is a link, not a regular file, or too large; the message says which."""


def plain_file(path: Path, limit: int) -> bytes | None:
    """The content of a file a stranger wrote if it is a regular file of at most limit bytes, opened without
    following a link (so neither a link to a file elsewhere nor one swapped in after a check is read, and a pipe
    never blocks); None if it is absent."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:  # ELOOP: a link; anything else that cannot be opened as a file
        raise NotPlainFile(f"{path.name} is not a plain file (a link, or nothing to read)") from None
    info = os.fstat(descriptor)  # before fdopen, which refuses a directory with an error of its own
    if not stat.S_ISREG(info.st_mode):
        os.close(descriptor)
        raise NotPlainFile(f"{path.name} is not a plain file")
    with os.fdopen(descriptor, "rb") as file:
        if info.st_size > limit:
            raise NotPlainFile(f"{path.name} is {info.st_size} bytes, over the limit of {limit}")
        content = file.read(limit + 1)
    if len(content) > limit:  # grew after the check
        raise NotPlainFile(f"{path.name} is over the limit of {limit} bytes")
    return content
