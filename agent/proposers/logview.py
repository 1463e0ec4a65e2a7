"""A run's log as the proposer sees it: its last lines, bounded and with control characters escaped, of the part
the run printed before it asked for its validation seal. What it printed after can hold validation text (its
own forward ran on the scored rows), so it reaches no proposer: not the tools, not a CLI's scratch, not a fix
prompt; humans read the whole log in the report. Reading the log itself (bounded, whatever its size) is
trainer/runs/run_log.py's."""

from __future__ import annotations

from pathlib import Path

from trainer.runs.run_log import LogView, escape_controls, read_log

__all__ = ["LogView", "last_lines", "log_seals", "prompt_tail", "read_log"]

NOT_MARKED = ("[harness] this log is not shown: its run ended before the harness marked where a run asks for its "
              "validation seal")


def last_lines(path: Path, count: int, shown_bytes: int | None) -> str:
    """The last `count` lines of what the run printed before it asked for its seal (shown_bytes of the log), from
    its last TAIL_BYTES at most, and a harness line saying how much came after."""
    if shown_bytes is None:
        return NOT_MARKED
    view = read_log(path, end=shown_bytes)
    lines = view.text.splitlines()[-count:]
    try:
        after = path.stat().st_size - view.size
    except OSError:
        after = 0
    if after > 0:
        lines.append(f"[harness] {after} more bytes the run printed after it asked for its validation seal are not "
                     "shown to researchers; its result is what the harness parsed (list_experiments)")
    return "\n".join(lines)


def log_seals(records: list) -> dict[str, int | None]:
    """log (relative to the workspace) -> how many of its bytes a proposer may read, from every run and fix
    attempt of the records (agent.recording.record.ExperimentRecord)."""
    return {entry.log: entry.log_shown_bytes for record in records
            for entry in [*record.runs, *(run for moved in record.rebased_from for run in moved.runs),
                          *record.fix_attempts] if entry.log}


def prompt_tail(log_tail: str, lines: int, chars: int = 8000) -> str:
    """The end of a log for a prompt: at most `lines` lines and `chars` characters, controls escaped."""
    text = "\n".join(log_tail.splitlines()[-lines:])
    return escape_controls(text if len(text) <= chars else "[...]" + text[-chars:])
