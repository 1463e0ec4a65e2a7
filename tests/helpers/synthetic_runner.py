"""A Runner that trains nothing: it scores a commit's train.py with a fixed table of which settings help,
writes a log with a summary block as train.py prints it, seals a small weights file, and answers the
trusted evaluator with the number the run printed. It lets a test drive the real loop through a long
night in seconds. It holds `slots` runs at once (a run waits for a free one), can make runs last a while
(`delays`: text in train.py -> seconds), records when each run held its slot, and cancel_all ends the
runs in flight at once. A machine that gets busier midway is `slows_after` runs, after which every run scores
`slowdown` worse. `fallback` makes every run say it trained with FlexAttention, no FlashAttention-3 build having
loaded (as on a GPU box whose hub cache lacks them)."""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from agent.workspace import Workspace
from trainer.evaluator.evaluation import Evaluation
from trainer.runs.jobs import EvaluationJob, Job
from trainer.runs.run_result import RunResult
from trainer.runs.triage import classify
from trainer.sandbox.seal import declared_batch_tokens

SUMMARY = dict(training_seconds="30.0", total_seconds="41.5", startup_seconds="3.1", eval_seconds="8.4",
               peak_vram_mb="1843.7", mfu_percent="38.25", tokens_per_second="218453", total_tokens_M="6.6",
               num_steps="417", num_params_M="12.3", depth="4", device="NVIDIA H200", device_memory_mb="143771",
               attention="fa3 varunneal/flash-attention-3", attention_skipped="none")
FALLBACK = dict(attention="flex", attention_skipped="varunneal/flash-attention-3: ValueError: Version 1 of "
                "'varunneal/flash-attention-3' is not available in the local cache and Hugging Face Hub is in "
                "offline mode")


def step_lines(final_loss: float, up_to: int = 100) -> str:
    """Step lines as train.py prints them, every tenth of the budget, the loss falling to final_loss."""
    def loss(p: int) -> float:
        return final_loss + (9.0 - final_loss) * (1 - p / 100) * math.exp(-p / 18)
    return "".join(f"step {round(4.16 * p):05d} ({p:5.1f}%) | loss {loss(p):.4f} | lr x1.00 | 72 ms | 218,453 tok/s "
                   f"| mfu 38.2% | epoch 1 | left {30 - 0.3 * p:.0f} s\n"
                   for p in range(0, up_to + 1, 10))


@dataclass(frozen=True)
class Span:
    name: str        # the run's name (its log's)
    slot: int
    started: float   # time.monotonic()
    ended: float


class SyntheticRunner:
    name = "synthetic"
    isolation = "synthetic runs: nothing is executed"

    def __init__(self, gains: dict[str, float], crashes: tuple[str, ...] = (), base: float = 1.5,
                 noise: float = 2e-4, slots: int = 1, delays: dict[str, float] | None = None,
                 slows_after: int | None = None, slowdown: float = 0.0, fallback: bool = False,
                 undefined: tuple[str, ...] = ()):
        self.gains = gains        # "NAME = value" (as the assignment starts) -> fall of val_bpb it brings
        self.crashes = crashes    # text whose presence in train.py makes the run run out of memory
        self.undefined = undefined  # names whose presence in train.py makes the run die of a NameError (fixable)
        self.base, self.noise = base, noise
        self.printed: dict[Path, float] = {}
        self.slots, self.delays = slots, delays or {}
        self.spans: list[Span] = []
        self.slows_after, self.slowdown = slows_after, slowdown
        self.fallback = fallback
        self.started = 0  # runs that took a slot so far
        self._free = list(range(slots))
        self._slot_freed = threading.Condition()
        self._cancelled = threading.Event()

    def cancel_all(self) -> None:
        self._cancelled.set()

    def most_at_once(self) -> int:
        """The most runs that held a slot at the same moment."""
        edges = sorted([(s.started, 1) for s in self.spans] + [(s.ended, -1) for s in self.spans])
        most = current = 0
        for _, step in edges:
            current += step
            most = max(most, current)
        return most

    def score(self, source: str, seed: int) -> float:
        gain = sum(g for setting, g in self.gains.items()
                   if re.search(rf"^{re.escape(setting)}(\s|$)", source, re.MULTILINE))
        wobble = ((seed * 7919) % 13 - 6) / 6 * self.noise  # a fixed value per seed
        return round(self.base - gain + wobble, 6)

    def run(self, workspace: Workspace, job: Job) -> RunResult:
        source = workspace.file_at("train.py", job.commit)
        with self._slot_freed:
            self._slot_freed.wait_for(lambda: self._free)
            slot = self._free.pop(0)
            self.started += 1
            slowed = self.slows_after is not None and self.started > self.slows_after
        started = time.monotonic()
        try:
            self._cancelled.wait(max([d for text, d in self.delays.items() if text in source], default=0.0))
            result = self._result(workspace, job, source, self.slowdown if slowed else 0.0)
        finally:
            with self._slot_freed:
                self.spans.append(Span(job.run.name, slot, started, time.monotonic()))
                self._free.append(slot)
                self._slot_freed.notify()
        result.where = f"synthetic slot {slot + 1}"
        return result

    def _result(self, workspace: Workspace, job: Job, source: str, slowdown: float) -> RunResult:
        commit, seed, paths = job.commit, job.seed, workspace.paths(job.run)
        log_path = paths.log
        log_path.parent.mkdir(parents=True, exist_ok=True)
        checkpoint = None
        digest = None
        if any(text in source for text in self.crashes):
            log, returncode = (step_lines(3.5, up_to=30) + "torch.OutOfMemoryError: CUDA out of memory. Tried to "
                               "allocate 2.00 GiB\n"), 1
        elif used := [name for name in self.undefined if name in source]:
            log, returncode = (f'Traceback (most recent call last):\n  File "train.py", line 1, in <module>\n'
                               f"NameError: name '{used[0]}' is not defined\n"), 1
        else:
            value = round(self.score(source, seed) + slowdown, 6)
            summary = dict(val_bpb=f"{value:.6f}", **SUMMARY) | (FALLBACK if self.fallback else {})
            log = step_lines(2 * value) + "---\n" + "\n".join(
                f"{k}: {v}" for k, v in summary.items()) + "\n"
            returncode = 0
            checkpoint = paths.checkpoint
            checkpoint.parent.mkdir(exist_ok=True)
            checkpoint.write_bytes(f"{commit} {seed}".encode())
            digest = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
            self.printed[checkpoint] = value
        log_path.write_text(log)
        lines = log.splitlines()
        # as a real run's: it asks for its seal after training, so what a proposer may read ends there
        shown = log.index("---") if "---" in log else len(log)
        return RunResult(returncode=returncode, timed_out=False, log_path=log_path,
                         verdict=classify(returncode, False, log, []), seconds=0.01, head="\n".join(lines[:5]),
                         tail="\n".join(lines[-20:]), checkpoint=checkpoint, checkpoint_sha256=digest,
                         seal_seconds=0.01, log_shown_bytes=shown,
                         trained_tokens=(417 + 1) * (declared_batch_tokens(source) or 2**11))  # SUMMARY's steps

    def evaluate(self, workspace: Workspace, job: EvaluationJob) -> Evaluation:
        value = self.printed[job.checkpoint]
        return Evaluation(val=value, holdout=value, device="cpu", lookahead=0.0, probes=1, audit=0.0, audited_tokens=64,
                          repeat=0.0)
