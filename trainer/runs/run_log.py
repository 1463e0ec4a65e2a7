"""A run's log, read in bounded pieces: it was written by train.py and may be any size.

Only the first HEAD_BYTES (the model description and its `config:` line) and the last
TAIL_BYTES (the traceback or the summary block) are ever read, whatever the file holds, and
no line read is longer than LINE_CHARS. What a run printed can hold anything (terminal escape
sequences, NUL, right-to-left overrides): escape_controls makes such text visible and harmless.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HEAD_BYTES = 64 * 1024
TAIL_BYTES = 256 * 1024
LINE_CHARS = 2000
HEAD_LINES, TAIL_LINES = 40, 60
# C0 and C1 controls (ESC, NUL, ...) and the bidirectional overrides and isolates that reorder a line.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class LogView:
    text: str    # head and tail joined (the whole log when it is small): what triage reads
    head: str    # its first HEAD_LINES lines
    tail: str    # its last TAIL_LINES lines
    size: int    # bytes in the file


def read_log(path: Path, end: int | None = None) -> LogView:
    """end: read the file as if it ended there (the part a run printed before its seal)."""
    try:
        with open(path, "rb") as log:
            size = log.seek(0, 2) if end is None else min(end, log.seek(0, 2))
            log.seek(0)
            if size <= HEAD_BYTES + TAIL_BYTES:
                head_bytes, tail_bytes = log.read(size), b""
            else:
                head_bytes = log.read(HEAD_BYTES)
                log.seek(size - TAIL_BYTES)
                tail_bytes = log.read(TAIL_BYTES)
    except OSError:
        return LogView("", "", "", 0)
    lines = _lines(head_bytes)
    if tail_bytes:
        skipped = size - HEAD_BYTES - TAIL_BYTES
        lines = lines[:-1] + [f"[... {skipped} bytes of the log not read ...]"] + _lines(tail_bytes)[1:]
    return LogView("\n".join(lines), "\n".join(lines[:HEAD_LINES]), "\n".join(lines[-TAIL_LINES:]), size)


def _lines(data: bytes) -> list[str]:
    return [line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + f" [... {len(line) - LINE_CHARS} more]"
            for line in data.decode("utf-8", errors="replace").splitlines()]


def escape_controls(text: str, keep_newlines: bool = True) -> str:
    """text with every control and bidi-override character written as a visible escape (\\x1b, \\u202e)."""
    def visible(match: re.Match) -> str:
        code = ord(match.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    escaped = _CONTROLS.sub(visible, str(text))
    return escaped if keep_newlines else escaped.replace("\n", "\\n").replace("\t", " ")
