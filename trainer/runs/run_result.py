"""What one run of a commit did, as the harness observed it and triage classified it: built by the run
path (trainer/runs/training_run.py) for every runner, written by a trainer worker into the spool, read by
the agent. Validated when built and when read back."""

from __future__ import annotations

from dataclasses import field
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from pydantic.dataclasses import dataclass

from trainer.evaluator.evaluation import Evaluation
from trainer.runs.run_id import RunId
from trainer.runs.run_log import LogView, read_log
from trainer.runs.triage import Triage, Verdict, classify, parse_model_config
from trainer.sandbox.limits import RunLimits
from trainer.tracks.hardware import Hardware


class Salvage(BaseModel):
    """A run that died after it sealed its weights, scored from those weights by the trusted evaluator instead
    (agent/judging/salvage.py): what it died of, and what the evaluator found."""
    model_config = ConfigDict(extra="forbid")

    crash: str                       # its verdict before the salvage: "oom: out of memory: ..."
    evaluation: Evaluation
    seconds: float                   # the evaluation's wall clock
    batch_rows: int | None = None    # the evaluator's batch, where it was made smaller (the run ran out of memory)


# A pydantic dataclass rather than a BaseModel: the run's printed config is `model_config`, a name
# BaseModel reserves for itself.
@dataclass(config=ConfigDict(extra="forbid"))
class RunResult:
    returncode: int | None
    timed_out: bool
    log_path: Path
    verdict: Verdict
    seconds: float
    head: str
    tail: str
    frozen_changed: list[str] = field(default_factory=list)
    model_config: dict = field(default_factory=dict)
    checkpoint: Path | None = None        # where the weights the run sealed are, if it did
    checkpoint_sha256: str | None = None  # their hash at the seal
    seal_seconds: float | None = None     # from the run's start to its seal, timed by the harness
    cpu_seconds: float | None = None      # CPU seconds its processes had used at its seal, read from the kernel
    trained_tokens: int | None = None     # training tokens make_dataloader handed out, as reported at the seal
    flops: float | None = None            # training FLOPs the harness counted at the seal (FLOPs-budgeted tracks)
    isolated: bool | None = None          # whether it ran as a stranger (sandbox/untrusted.py); None: never started
    where: str = ""                       # what ran it: a local slot and its GPU, a spool worker, a cluster node
    limits: RunLimits | None = None       # what it was allowed to consume
    ended: str | None = None              # why the harness ended it before it exited (after its seal)
    device: str = "cpu"                   # what the harness let it reach: "cuda" where a GPU was in its view
    run: RunId | None = None              # which run it was (the agent's Training sets it)
    hardware: Hardware | None = None      # the machine that ran it, as the harness read it there
    salvage: Salvage | None = None        # it died after its seal and was scored from its weights (verdict: ok)
    # The bytes at the start of its log printed before it asked for its seal: what a proposer may read of it (head,
    # tail and the verdict's quotes come from there). None: not measured, so none of its output is shown.
    log_shown_bytes: int | None = None

    @property
    def summary(self) -> dict[str, str]:
        return self.verdict.summary

    @classmethod
    def observed(cls, log_path: Path, returncode: int | None, timed_out: bool, seconds: float,
                 frozen_changed: list[str], seal_refused: str | None = None, limit_hit: str | None = None,
                 harness_failed: str | None = None, **sealed) -> RunResult:
        """The result of a run that ran, classified from its (bounded) log; what it says of the log in words (head,
        tail, the verdict's quotes, the model config) comes from the part printed before the run's seal."""
        log = read_log(log_path)
        shown = sealed.get("log_shown_bytes")
        before = read_log(log_path, end=shown) if shown else LogView("", "", "", 0)
        verdict = classify(returncode, timed_out, log.text, frozen_changed, seal_refused, limit_hit, harness_failed,
                           sealed.get("ended"), quote=bool(shown) and shown >= log.size)
        return cls(returncode=returncode, timed_out=timed_out, log_path=log_path, seconds=seconds, verdict=verdict,
                   head=before.head, tail=before.tail, frozen_changed=frozen_changed,
                   model_config=parse_model_config(before.head), **sealed)

    @classmethod
    def infra(cls, problem: str, log_path: Path, seconds: float = 0.0, said_by: str = "harness") -> RunResult:
        """A run that could not run or finish for a reason outside the experiment; the problem is
        appended to its log (created if need be) as said_by's line."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a") as log:
            log.write(f"\n[{said_by}] {problem}\n")
        log = read_log(log_path)
        return cls(returncode=None, timed_out=False, log_path=log_path, verdict=Verdict(Triage.INFRA, problem, {}),
                   seconds=seconds, head=log.head, tail=log.tail, log_shown_bytes=log.size)

