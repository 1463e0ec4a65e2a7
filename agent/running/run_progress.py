"""What an experiment is doing now: its phase (written by the loop's observer) and its last step line (read
from the run's log).

train.py prints lines like ``step 00037 ( 68.4%) | loss 4.5405 | lr x0.69 | 982 ms | 4,172 tok/s | mfu n/a |
epoch 1 | left 12 s``. The run is untrusted: only the last few KiB of its log are read, each field is parsed
with a bounded pattern into a number, and nothing here is ever used for a decision; it is for display only.
The phases of every experiment in flight live in progress.json in the workspace (written atomically), so that
`status --watch` in another process shows what the loop shows.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from pydantic import BaseModel, TypeAdapter, ValidationError

from trainer.files.atomic import read_json, write_json_atomic

PROGRESS_FILE = "progress.json"
TAIL_BYTES = 8192          # of the log, read from its end
MAX_LINE_CHARS = 400       # a longer line is not a step line
_STEP = re.compile(r"step (\d{1,9}) \(\s{0,6}(\d{1,3}(?:\.\d{1,3})?)%\)")
_FIELDS = {
    "loss": re.compile(r"\| loss (\d{1,6}(?:\.\d{1,8})?) "),
    "tokens_per_second": re.compile(r"\| ([\d,]{1,15}) tok/s"),
    "mfu_percent": re.compile(r"\| mfu (\d{1,3}(?:\.\d{1,3})?)%"),
    "left_seconds": re.compile(r"\| left (\d{1,9}) s"),
}


class StepLine(BaseModel):
    step: int
    percent: float
    loss: float | None = None
    tokens_per_second: float | None = None
    mfu_percent: float | None = None
    left_seconds: float | None = None


class Phase(BaseModel):
    experiment_id: str
    phase: str                 # proposing | training | re-running | noise floor | verifying | confirming | deciding
    detail: str = ""           # who proposes and with how many tool calls, the seed, ...
    log: str | None = None     # the run's log, relative to the workspace
    since: float               # time.time() when the phase began
    where: str | None = None   # what ran the run (a slot and its GPU, a node), once the runner said


class Progress(BaseModel):
    """progress.json: the phase of each experiment in flight, by experiment id."""
    phases: list[Phase]


_PHASES = TypeAdapter(Progress | Phase)  # a single Phase is what a loop that ran one experiment at a time wrote


def parse_step_line(line: str) -> StepLine | None:
    if (head := _STEP.match(line) if len(line) <= MAX_LINE_CHARS else None) is None:
        return None
    values: dict = {"step": int(head.group(1)), "percent": min(float(head.group(2)), 100.0)}
    for name, pattern in _FIELDS.items():
        if found := pattern.search(line):
            values[name] = float(found.group(1).replace(",", ""))
    return StepLine(**values)


def last_step_line(log: Path) -> StepLine | None:
    """The last step line among the final TAIL_BYTES of log, or None (no log yet, no step line)."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, 2) - TAIL_BYTES))
            tail = handle.read(TAIL_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    parsed = (parse_step_line(line.strip()) for line in reversed(tail.splitlines()))
    return next((step for step in parsed if step is not None), None)


def write_phases(workspace_dir: Path, phases: list[Phase]) -> None:
    """progress.json with these phases; removed when none is left."""
    path = workspace_dir / PROGRESS_FILE
    if not phases:
        path.unlink(missing_ok=True)
    else:
        write_json_atomic(path, Progress(phases=phases).model_dump())


def read_phases(workspace_dir: Path) -> list[Phase]:
    """The phases in progress.json (either form), or none when it is missing or not one."""
    try:
        data = read_json(workspace_dir / PROGRESS_FILE)
        read = _PHASES.validate_python(data) if data else None
    except (ValidationError, TypeError):
        return []
    return [] if read is None else read.phases if isinstance(read, Progress) else [read]


def describe(phase: Phase, step: StepLine | None, now: float | None = None) -> str:
    """The one line shown for an experiment: its phase, and the run's progress while it trains."""
    elapsed = (now or time.time()) - phase.since
    text = f"{phase.experiment_id} {phase.phase}" + (f" {phase.detail}" if phase.detail else "")
    if phase.log is None:
        text += f" ({elapsed:.0f} s)"
    elif step is None:
        text += f": starting ({elapsed:.0f} s)"
    else:
        text += (f": step {step.step} ({step.percent:.0f}% of the budget)"
                 + (f", loss {step.loss:.4f}" if step.loss is not None else "")
                 + (f", {step.tokens_per_second:,.0f} tok/s" if step.tokens_per_second is not None else "")
                 + (f", MFU {step.mfu_percent:.1f}%" if step.mfu_percent is not None else "")
                 + f", {elapsed:.0f} s in"
                 + (f", ETA {step.left_seconds:.0f} s + eval" if step.left_seconds is not None else ""))
    return text + (f", ran on {phase.where}" if phase.where else "")
