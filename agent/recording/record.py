"""The experiment record: one line of experiments.jsonl, typed.

Written with exactly the keys it was built with (model_dump(exclude_unset=True)), so the file keeps the reference's
format. Read from the lines every earlier version wrote: every field but id and status has a default, and unknown
keys are kept (extra="allow"), so a newer version's record read here still holds them for whoever reads it next.
"""

from __future__ import annotations

import dataclasses
import json
import time
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent.llm.types import Usage
from agent.recording.novelty import Novelty
from trainer.runs.run_id import RunId
from trainer.tracks.hardware import Hardware

SIMPLIFY = "simplify"  # how a keep won by removing code is shown (its status stays keep)


class ExperimentStatus(str, Enum):
    KEEP = "keep"
    DISCARD = "discard"
    CRASH = "crash"
    INTERRUPTED = "interrupted"  # the loop stopped while it ran (results.tsv calls it crash)
    NOISE = "noise"              # re-runs of the best that measure sigma: not an experiment
    CONTROL = "control"          # a re-run of the best that checks the machine's conditions: not an experiment
    PENDING = "pending"          # a draft in inflight/<id>.json while the experiment runs, never in the ledger
    SUPERSEDED = "superseded"    # beat its parent, but its edits no longer apply to the new best (results.tsv: discard)

    def __str__(self) -> str:
        return self.value


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow")


class Check(_Part):
    """What the trusted evaluator found scoring one run's sealed weights (agent/judging/verify.py): its score
    against the printed one and the worst of each check of the model's answers (trainer/evaluator/evaluation.py)."""
    seed: int | None = None
    printed: float | None = None          # what the run printed
    trusted: float | None = None          # the evaluator's val score
    gap: float | None = None              # |trusted - printed|, unrounded
    tolerance: float | None = None        # the gap allowed, by device
    lookahead: float | None = None
    probes: int | None = None
    audit: float | None = None
    audited_tokens: int | None = None
    repeat: float | None = None
    device: str | None = None             # where the evaluator's model server ran
    seconds: float | None = None          # the evaluation's wall clock
    holdout: float | None = None          # the evaluator's holdout score, where it was asked


class RunEntry(_Part):
    """One training run of a commit (an experiment has one, more when re-run). val_bpb is the number of record: the
    trusted evaluator's score of the sealed weights once it scored them (`trusted`), before that what the run
    printed. Every run whose number could keep a commit is scored (agent/judging/verify.py); a discard may not be."""
    seed: int | None = None
    val_bpb: float | None = None          # the number of record, None unless it finished cleanly
    printed: float | None = None          # what the run printed
    trusted: bool | None = None           # val_bpb is the trusted evaluator's
    holdout_bpb: float | None = None      # the trusted evaluator's score on the holdout split, where it was asked
    check: Check | None = None            # what the trusted evaluator found (agent/judging/verify.py)
    checkpoint: str | None = None         # the sealed weights, relative to the workspace
    checkpoint_sha256: str | None = None
    training_seconds: float | None = None
    seal_seconds: float | None = None
    cpu_seconds: float | None = None      # CPU seconds of its processes at its seal, read by the harness
    trained_tokens: int | None = None
    flops: float | None = None            # training FLOPs the harness counted at the seal (FLOPs-budgeted tracks)
    device: str | None = None             # what the harness let the run reach: cuda where a GPU was in view
    triage: str | None = None
    seconds: float | None = None          # the runner's wall clock for the run
    log: str | None = None
    where: str | None = None              # what ran it (local slot and GPU, spool worker, cluster node)
    limits: str | None = None             # what it was allowed to consume (trainer/sandbox/limits.py)
    ended: str | None = None              # why the harness ended it after its seal, before it exited
    hardware: Hardware | None = None      # the machine that ran it (trainer/tracks/hardware.py)
    salvaged: bool | None = None          # it died after its seal; val_bpb is the trusted evaluator's score of
    salvaged_from: str | None = None      # its sealed weights, and this the crash it died of (agent/judging/salvage.py)
    log_shown_bytes: int | None = None    # the start of its log printed before it asked for its seal: all a proposer
                                          # may read of it (None, in records older than that: none of it)
    run_id: RunId | None = Field(default=None, exclude=True)  # which run it was, while the loop that ran it runs

    @classmethod
    def of(cls, result: Any, seed: int, workspace_dir: Path) -> RunEntry:
        """The entry for one finished run (an agent.running.runner.RunResult)."""
        if result.salvage is not None:
            return cls._salvaged(result, seed, workspace_dir)
        ok = result.verdict.triage.value == "ok"
        printed = summary_number(result.summary.get("val_bpb")) if ok else None
        given = dict(cpu_seconds=result.cpu_seconds, flops=result.flops, where=result.where or None,
                     limits=result.limits.describe() if result.limits else None, ended=result.ended or None,
                     hardware=result.hardware, log_shown_bytes=result.log_shown_bytes)
        return cls(run_id=result.run, seed=seed, val_bpb=printed, printed=printed,
                   checkpoint=str(result.checkpoint.relative_to(workspace_dir)) if result.checkpoint else None,
                   checkpoint_sha256=result.checkpoint_sha256,
                   training_seconds=summary_number(result.summary.get("training_seconds")),
                   seal_seconds=result.seal_seconds, trained_tokens=result.trained_tokens,
                   device=result.device, triage=result.verdict.triage.value,
                   seconds=round(result.seconds, 3), log=str(result.log_path.relative_to(workspace_dir)),
                   **{key: value for key, value in given.items() if value is not None})  # the rest left unset

    @classmethod
    def _salvaged(cls, result: Any, seed: int, workspace_dir: Path) -> RunEntry:
        """A run that died after its seal: its number is the trusted evaluator's score of its sealed weights; what
        it printed before it died (if anything) is shown in its check, and stands for nothing."""
        salvage, entry = result.salvage, cls.of(dataclasses.replace(result, salvage=None), seed, workspace_dir)
        evaluation, trusted = salvage.evaluation, round(salvage.evaluation.val, 6)
        entry.val_bpb, entry.printed, entry.trusted, entry.salvaged, entry.salvaged_from = (trusted, None, True,
                                                                                             True, salvage.crash)
        entry.check = Check(seed=seed, printed=summary_number(result.summary.get("val_bpb")), trusted=trusted,
                            lookahead=evaluation.lookahead, probes=evaluation.probes, audit=evaluation.audit,
                            audited_tokens=evaluation.audited_tokens, repeat=evaluation.repeat,
                            device=evaluation.device, seconds=salvage.seconds)
        return entry


class Timings(_Part):
    """Seconds: proposing, waiting for the proposal, training (runner), everything else the agent did."""
    propose_s: float | None = None
    wait_s: float | None = None
    run_s: float | None = None
    agent_s: float | None = None
    total_s: float | None = None


class SimplifyEvidence(_Part):
    """The simplify rule's numbers (agent/judging/simplify.py): fewer lines for an equal result, within the
    drift guard."""
    lines_removed: int
    candidate_mean: float
    best_mean: float
    standard_error: float     # of the difference of the two means (0 without a noise floor)
    best_ever_mean: float     # the lowest mean any best commit reached
    sigma: float | None = None
    allowed: bool
    why: str


class Verification(_Part):
    checks: list[Check] = Field(default_factory=list)
    verify_s: int | float = 0             # an int where no run was scored: the sum of no seconds

    def as_written(self) -> dict[str, Any]:
        """What experiments.jsonl holds of it, which a transcript event carries too."""
        return self.model_dump(mode="json", exclude_unset=True)


class Evidence(_Part):
    """What a decision was based on (the rule of agent/judging/noise.py, the checks of agent/judging/verify.py,
    the rule of agent/judging/simplify.py)."""
    candidate_runs: list[float | None] | None = None
    best_runs: list[float] | None = None
    gain: float | None = None
    sigma: float | None = None
    rule: str | None = None
    threshold: float | None = None
    z: float | None = None                # gain / standard error of the difference (agent/judging/significance.py)
    p: float | None = None                # one-sided p-value of z (Student's t with sigma_df, else normal)
    sigma_df: int | None = None           # degrees of freedom of sigma: the noise floor's runs - 1
    implausible_fall: str | None = None
    verification: Verification | None = None
    simplify: SimplifyEvidence | None = None
    kept_as: str | None = None            # SIMPLIFY for a keep won by removing code for an equal result


class Drift(_Part):
    """What a control run of the best found (agent/judging/drift.py): how far it moved from the best's earlier
    mean, and whether that is more than the noise explains."""
    earlier_mean: float               # of the best's runs before the control
    earlier_runs: int
    moved: float                      # the control's val_bpb less the earlier mean (positive: worse now)
    sigma: float | None = None        # of the latest noise floor
    flagged: bool = False             # moved more than DRIFT_SIGMAS x sigma
    pooled: bool | None = None        # counted among the best's runs (None: written before flags were held back)
    confirms: str | None = None       # the flagged control before it that this one shows was the conditions
    suspect: bool = False             # flagged on a track whose budget counts steps or FLOPs


class FixAttempt(_Part):
    """A fixable crash the proposer then tried to fix: the commit that crashed and why."""
    commit: str
    triage: str
    reason: str
    log: str
    log_shown_bytes: int | None = None  # as RunEntry's


class RebasedFrom(_Part):
    """A parent an experiment was trained on before the best moved on: its commit there and those runs."""
    parent: str
    commit: str
    runs: list[RunEntry] = Field(default_factory=list)
    status: str | None = None      # what it would have been against that parent (keep, or a close call)


class ProgramRef(_Part):
    name: str | None = None
    sha256: str | None = None


class Plateau(_Part):
    """The plateau an experiment's record ended (agent/judging/plateau.py): `streak` experiments in a row without a
    keep, the first of them `since`, and what the loop did."""
    streak: int
    since: str
    action: str                      # switch, stop or continue
    program: str | None = None       # switch: the program followed from the next experiment on (its path)
    position: int | None = None      # switch: that program's place in the rotation, from 0
    rotation_spent: bool | None = None  # stop because the last program of the rotation reached its plateau


class Imported(_Part):
    """Where an experiment imported from a reference autoresearch night came from (agent/importing/)."""
    source: str                        # the checkout it was read from
    line: int                          # its line in that checkout's results.tsv
    reference_commit: str              # the commit as results.tsv names it
    reference_parent: str | None = None  # that commit's parent in the checkout, where the commit exists there
    diff_available: bool = False       # False: the commit is not in the checkout, so its change is unknown
    status: str | None = None          # the status as the night wrote it (a fork's word is mapped onto ours)
    extra: dict[str, str] = {}         # the columns of its row beyond the reference's five, by name


class ExperimentRecord(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, use_enum_values=False)

    id: str
    status: ExperimentStatus
    parent: str | None = None
    commit: str = ""
    triage: str | None = None
    verified: bool | None = None
    reason: str = ""
    description: str = ""
    val_bpb: float | None = None        # mean of the runs (what results.tsv shows)
    runs: list[RunEntry] = Field(default_factory=list)
    evidence: Evidence = Field(default_factory=Evidence)
    checkpoint: str | None = None
    peak_vram_mb: float | None = None
    summary: dict[str, Any] = Field(default_factory=dict)
    architecture: dict[str, Any] = Field(default_factory=dict, alias="model_config")  # the `config:` line
    returncode: int | None = None
    timed_out: bool | None = None
    frozen_changed: list[str] = Field(default_factory=list)
    proposed_against: str | None = None
    rebased: bool | None = None
    rebased_from: list[RebasedFrom] = Field(default_factory=list)  # earlier parents whose best moved on meanwhile
    timings: Timings = Field(default_factory=Timings)
    proposer: str | None = None
    proposal: dict[str, Any] = Field(default_factory=dict)  # the proposer's own notes (trial, model, ...)
    fix_attempts: list[FixAttempt] = Field(default_factory=list)
    llm: Usage = Field(default_factory=Usage)     # what its proposal and fixes spent
    program: ProgramRef = Field(default_factory=ProgramRef)
    plateau: Plateau | None = None        # set on the experiment that ended a plateau's streak
    diff: str = ""
    log: str | None = None
    log_tail: str = ""
    transcript: str | None = None
    # the proposal's reasoning; a lesson is about an earlier experiment's result (lesson_for)
    hypothesis: str = ""
    expected: str = ""
    lesson: str = ""
    lesson_for: str | None = None
    # what the change is: new hyperparameter values only, or new code (agent/recording/novelty.py)
    novelty: Novelty | None = None
    started: str | None = None
    finished: str | None = None
    # noise-floor records only
    of: str | None = None                 # the experiment re-run
    values: list[float] | None = None     # every run of that commit, the re-runs included
    sigma: float | None = None
    drift: Drift | None = None            # control records only
    imported: Imported | None = None      # set on the experiments of a night brought in by `autoresearch import`

    @classmethod
    def draft(cls, experiment_id: str, program: ProgramRef) -> ExperimentRecord:
        """An experiment's record as it starts: pending, filled in by each step and written to its in-flight
        marker, then decided and appended to the ledger (or recorded as interrupted, with what it spent)."""
        # set now, so that the record is written with them (containers filled in later count as set too)
        return cls(id=experiment_id, status=ExperimentStatus.PENDING, program=program, llm=Usage.total(),
                   timings=Timings(), runs=[], fix_attempts=[])

    @property
    def is_experiment(self) -> bool:
        return self.status not in (ExperimentStatus.NOISE, ExperimentStatus.CONTROL)

    @property
    def kept_as(self) -> str:
        if self.status == ExperimentStatus.KEEP and self.evidence.kept_as == SIMPLIFY:
            return SIMPLIFY
        return self.status.value

    @property
    def salvaged(self) -> bool:
        """Whether a run of it died after its seal and was judged on its sealed weights (RunEntry.salvaged)."""
        return any(run.salvaged for run in self.runs)

    @property
    def triage_shown(self) -> str:
        """Its triage as status and report show it, flagged where a run of it was salvaged."""
        return f"{self.triage or ''}{', salvaged' if self.salvaged else ''}"

    @property
    def hardware(self) -> Hardware | None:
        """The machine its first run trained on (its fingerprint, as the harness read it there)."""
        return next((run.hardware for run in self.runs if run.hardware is not None), None)

    @property
    def shown_commit(self) -> str:
        """The commit as the night knows it: this workspace's, or for an imported row the night's own."""
        return self.imported.reference_commit if self.imported else self.commit[:7]

    @property
    def measured(self) -> list[float]:
        """val_bpb of the runs that produced one; a record older than per-run entries counts its own."""
        if self.runs:
            return [run.val_bpb for run in self.runs if run.val_bpb is not None]
        return [self.val_bpb] if self.val_bpb is not None else []

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True, exclude_unset=True), sort_keys=True)


def summary_number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def now() -> str:
    """A record's time stamp (local time with its offset)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
