"""What a run (or an evaluation) is, typed: the experiment it belongs to, its kind and number, and the run it
follows. Its name (logs/<name>.log, checkpoints/<name>.pt, runs/<name>/) is rendered from it in one place
and never parsed back: whoever needs to know what a run is reads its RunId.

    0003                    the experiment's commit          0003.rebase1         on a new best
    0003.fix1               a fix after a fixable crash      0003.rerun2          a re-run with a fresh seed
    0003.retry              after a failure of the machine   0003.canary          the best, on the same machine
    0001-noise2             a re-run of the best for sigma   verify-0003.rerun2   the trusted evaluator on a run
    verify-0003-best-0001   the best's weights, scored for 0003's holdout check    confirm-0004  `confirm`
"""

from __future__ import annotations

import secrets
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict


class RunKind(str, Enum):
    TRAIN = "train"
    NOISE = "noise"
    REBASE = "rebase"
    FIX = "fix"
    RERUN = "rerun"
    RETRY = "retry"
    CANARY = "canary"
    VERIFY = "verify"        # the trusted evaluator on the weights a run sealed
    VERIFY_BEST = "verify-best"  # on the best's weights, for an experiment's holdout check
    CONFIRM = "confirm"      # `autoresearch confirm` on a kept experiment's weights
    SALVAGE = "salvage"      # the trusted evaluator on the weights of a run that died after its seal

    def __str__(self) -> str:
        return self.value


NUMBERED = (RunKind.NOISE, RunKind.REBASE, RunKind.FIX, RunKind.RERUN)


class RunId(BaseModel):
    model_config = ConfigDict(frozen=True)

    experiment: str                 # the record it belongs to (a noise floor's runs: the best re-run)
    kind: RunKind = RunKind.TRAIN
    n: int = 0                      # of a numbered kind
    after: RunId | None = None      # the run this one follows (a fix of a re-based run, a retry, a verification)
    best: str | None = None         # VERIFY_BEST: the best whose weights are scored

    @classmethod
    def train(cls, experiment: str) -> RunId:
        return cls(experiment=experiment)

    @classmethod
    def noise(cls, best: str, n: int) -> RunId:
        return cls(experiment=best, kind=RunKind.NOISE, n=n)

    @classmethod
    def confirm(cls, experiment: str) -> RunId:
        return cls(experiment=experiment, kind=RunKind.CONFIRM)

    @classmethod
    def verify_best(cls, experiment: str, best: str) -> RunId:
        return cls(experiment=experiment, kind=RunKind.VERIFY_BEST, best=best)

    def then(self, kind: RunKind, n: int = 0) -> RunId:
        return RunId(experiment=self.experiment, kind=kind, n=n, after=self)

    @property
    def name(self) -> str:
        kind, after = self.kind, self.after.name if self.after else self.experiment
        if kind == RunKind.TRAIN:
            return self.experiment
        if kind == RunKind.NOISE:
            return f"{self.experiment}-noise{self.n}"
        if kind == RunKind.VERIFY:
            return f"verify-{after}"
        if kind == RunKind.VERIFY_BEST:
            return f"verify-{self.experiment}-best-{self.best}"
        if kind == RunKind.CONFIRM:
            return f"confirm-{self.experiment}"
        return f"{after}.{kind.value}{self.n if kind in NUMBERED else ''}"

    def chain(self) -> list[RunId]:
        """The runs it follows, the first first, and itself."""
        return (self.after.chain() if self.after else []) + [self]

    @property
    def line(self) -> str:
        """The line live progress shows it on: its experiment's (re-runs, fixes, re-bases, retries and
        verifications replace that line), except that each noise-floor run has its own, as several run at once."""
        noise = next((run for run in self.chain() if run.kind == RunKind.NOISE), None)
        return noise.name if noise else self.experiment

    def __str__(self) -> str:
        return self.name


class RunPaths(BaseModel):
    model_config = ConfigDict(frozen=True)

    log: Path
    checkpoint: Path
    run_dir: Path

    @classmethod
    def of(cls, workspace_dir: Path, runs_dir: Path, run: RunId) -> RunPaths:
        return cls(log=workspace_dir / "logs" / f"{run.name}.log",
                   checkpoint=workspace_dir / "checkpoints" / f"{run.name}.pt", run_dir=runs_dir / neutral_name())


def neutral_name() -> str:
    """A run directory's name, at random: its working directory is the one thing of the harness's a train.py
    can always read, and a name such as 0001-control1 would tell it which of its runs set the bar (a control, a
    re-run, a verification), so that it could behave worse on those."""
    return f"run-{secrets.token_hex(8)}"
