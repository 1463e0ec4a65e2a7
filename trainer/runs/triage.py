"""Crash triage: what happened to a run, as a pure function of what the runner observed.

| class         | action                                                              |
|---------------|---------------------------------------------------------------------|
| ok            | the summary parsed: keep or discard on val_bpb                      |
| fixable       | crash in the code under test: its log tail goes back to the proposer |
| oom           | crash; the next proposal is told memory ran out                     |
| diverged      | crash (train.py printed FAIL:)                                      |
| timeout       | crash; the runner killed the whole process group                    |
| infra         | not the experiment's fault: retry the same commit once, then stop   |
| tamper        | crash, flagged: frozen files changed, exit 0 without a metric, or   |
|               | an attempt on the validation seal (reading val/holdout in training) |
| over_budget   | crash: the run trained past its track's budget as the harness       |
|               | counts it at the seal (trainer/sandbox/seal.py); its number is no result    |
| interrupted   | the loop stopped during the run; recorded once, workspace reset     |
"""

from __future__ import annotations

import math
import re
import signal
from dataclasses import dataclass
from enum import Enum
from typing import Annotated

from pydantic import Field, StrictBool, StrictInt, StringConstraints, TypeAdapter, ValidationError

from trainer.files import parsing
from trainer.runs.run_log import escape_controls
from trainer.sandbox.seal import OVER_BUDGET


class Triage(str, Enum):
    OK = "ok"
    FIXABLE = "fixable"
    OOM = "oom"
    DIVERGED = "diverged"
    TIMEOUT = "timeout"
    INFRA = "infra"
    TAMPER = "tamper"
    OVER_BUDGET = "over_budget"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Verdict:
    triage: Triage
    reason: str
    summary: dict[str, str]


OOM_PATTERNS = re.compile(r"CUDA out of memory|OutOfMemoryError|MemoryError|MPS backend out of memory|"
                          r"Cannot allocate memory|std::bad_alloc")
INFRA_PATTERNS = re.compile(
    r"CUDA driver version is insufficient|no CUDA-capable device|CUDA error: (?:initialization error|"
    r"unspecified launch failure|an illegal memory access|uncorrectable ECC)|NCCL error|cudaErrorDevicesUnavailable|"
    r"No space left on device|Disk quota exceeded|is not prepared in|data is missing|"
    r"no tokenizer in|was built for another track|PrepareError|ModuleNotFoundError: No module named '(?:torch|"
    r"numpy|pyarrow|tiktoken)'")
# prepare.py marks every refusal of the seal; a training run that opens a sealed split's files itself
# finds them missing (the runner's data view has none, an isolated run sees an empty mount).
SEAL_BREACH = re.compile(r"\(validation seal\)|^\w*(?:Error|Exception)\b.*/(?:val|holdout)(?:/|'|\"|$)",
                         re.MULTILINE)
FAIL_LINE = re.compile(r"^FAIL: (.*)$", re.MULTILINE)
EXCEPTION_LINE = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception|Interrupt)\b.*)$", re.MULTILINE)

SUMMARY_KEYS, SUMMARY_VALUE_CHARS = 64, 200
# No model scores worse than this many bits per byte (a uniform guess over the vocabulary costs at most its log2, 13
# bits a token, and a token is at least a byte): a printed number above it, or at or below 0, is no val_bpb. Beside
# bounding what the number can carry, it keeps a printed number from holding more than ~26 bits at 6 decimals.
MAX_VAL_BPB = 64
AFTER_SEAL = "(a line it printed after its validation seal: in its log, not shown to the researcher)"
CONFIG_KEYS, CONFIG_LINE_CHARS = 64, 8000
Key = Annotated[str, StringConstraints(pattern=r"^\w{1,64}$")]
Scalar = StrictBool | StrictInt | Annotated[float, Field(allow_inf_nan=False)] \
    | Annotated[str, StringConstraints(max_length=SUMMARY_VALUE_CHARS)] | None
ConfigValue = Scalar | Annotated[list[Scalar], Field(max_length=CONFIG_KEYS, strict=True)]
# What a run's log may put into a record: a few short strings, and a flat config of JSON scalars.
SUMMARY = TypeAdapter(Annotated[dict[Key, Annotated[str, StringConstraints(max_length=SUMMARY_VALUE_CHARS)]],
                                Field(max_length=SUMMARY_KEYS)])
MODEL_CONFIG = TypeAdapter(Annotated[dict[Key, ConfigValue], Field(max_length=CONFIG_KEYS)])


def parse_summary(log_text: str) -> dict[str, str]:
    """key: value lines after the last line that is exactly --- (the first SUMMARY_KEYS keys that are
    words, values clipped to SUMMARY_VALUE_CHARS and their control characters escaped)."""
    lines = log_text.splitlines()
    if "---" not in lines:
        return {}
    start = len(lines) - 1 - lines[::-1].index("---")
    summary: dict[str, str] = {}
    for line in lines[start + 1:]:
        key, sep, value = line.partition(":")
        if sep and key.strip() and " " not in key.strip() and len(summary) < SUMMARY_KEYS:
            summary[key.strip()[:64]] = escape_controls(value.strip(), keep_newlines=False)[:SUMMARY_VALUE_CHARS]
    try:
        return SUMMARY.validate_python(summary)
    except ValidationError:  # a key that is not a word: keep the ones that are
        return {k: v for k, v in summary.items() if re.fullmatch(r"\w{1,64}", k)}


def parse_model_config(log_text: str) -> dict:
    """The resolved model config train.py prints as `config: {...}` (a Python literal of JSON scalars,
    at most CONFIG_KEYS of them), or {} when the line is missing, too long or holds anything else."""
    for line in log_text.splitlines():
        if line.startswith("config: "):
            literal = line[len("config: "):]
            try:
                value = parsing.literal_eval(literal) if len(literal) <= CONFIG_LINE_CHARS else None
                if isinstance(value, dict):  # tuples are lists in JSON; sets and the rest are refused
                    value = {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
                return MODEL_CONFIG.validate_python(value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, ValidationError):
                return {}
    return {}


def classify(returncode: int | None, timed_out: bool, log_text: str, frozen_changed: list[str],
             seal_refused: str | None = None, limit_hit: str | None = None, harness_failed: str | None = None,
             ended: str | None = None, quote: bool = True) -> Verdict:
    """harness_failed: the harness's own failure (its disk full); ended: why the harness ended the run early;
    quote: whether the reason may quote the log, which it may not where the run printed anything after it asked
    for its seal: a reason reaches the proposers, and what the run printed there could carry validation text
    (even a line it had printed before, chosen afterwards from many). Such a reason names the line's kind."""
    summary = parse_summary(log_text)

    def _said(line: str) -> str:
        return line if quote else AFTER_SEAL

    def _line_of(index: int) -> str:
        start, end = log_text.rfind("\n", 0, index) + 1, log_text.find("\n", index)
        return _said(log_text[start:end if end != -1 else None].strip()[:300])

    if frozen_changed:
        return Verdict(Triage.TAMPER, f"frozen files changed during the run: {', '.join(frozen_changed)}", summary)
    if harness_failed:
        return Verdict(Triage.INFRA, f"the machine failed, not the run: {harness_failed}", summary)
    if limit_hit:
        return Verdict(Triage.OVER_BUDGET, f"stopped by the harness: {limit_hit}", summary)
    if seal_refused and seal_refused.startswith(OVER_BUDGET):
        return Verdict(Triage.OVER_BUDGET, seal_refused.removeprefix(OVER_BUDGET), summary)
    if seal_refused:
        return Verdict(Triage.TAMPER, f"the harness refused to open validation data: {seal_refused}", summary)
    if breach := SEAL_BREACH.search(log_text):
        return Verdict(Triage.TAMPER, f"the training process reached for validation data: "
                                      f"{_line_of(breach.start())}", summary)
    if timed_out:
        return Verdict(Triage.TIMEOUT, f"{ended or 'killed at the hard timeout'} (the whole process group)", summary)
    if (infra := INFRA_PATTERNS.search(log_text)) and returncode != 0:
        exceptions = EXCEPTION_LINE.findall(log_text)
        detail = _said(exceptions[-1][:300]) if exceptions else _line_of(infra.start())
        return Verdict(Triage.INFRA, f"the machine or its data failed: {detail}", summary)
    if returncode == 0:
        try:
            val_bpb = float(summary.get("val_bpb", ""))
        except ValueError:
            return Verdict(Triage.TAMPER, "exited 0 without a val_bpb in its summary", summary)
        if not math.isfinite(val_bpb) or not 0 < val_bpb <= MAX_VAL_BPB:
            return Verdict(Triage.TAMPER, f"exited 0 with an impossible val_bpb (not a number in (0, {MAX_VAL_BPB}])",
                           summary)
        return Verdict(Triage.OK, f"val_bpb {val_bpb:.6f}", summary)
    if fail := FAIL_LINE.search(log_text):
        return Verdict(Triage.DIVERGED, _said(fail.group(1).strip()), summary)
    if oom := OOM_PATTERNS.search(log_text):
        return Verdict(Triage.OOM, f"out of memory: {_line_of(oom.start())}", summary)
    if returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        return Verdict(Triage.OVER_BUDGET, "killed for writing a file larger than its disk limit", summary)
    if returncode == -signal.SIGKILL:
        return Verdict(Triage.OOM, "killed by SIGKILL (most likely the kernel's out-of-memory killer)", summary)
    if exceptions := EXCEPTION_LINE.findall(log_text):
        return Verdict(Triage.FIXABLE, _said(exceptions[-1][:300]), summary)
    return Verdict(Triage.FIXABLE, f"exited with code {returncode} and no traceback", summary)
