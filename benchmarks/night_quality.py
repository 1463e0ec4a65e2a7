"""How good the research of one finished night was, measured afterwards on its workspace.

- gain: the baseline's mean val_bpb minus the final best's (the means of their runs of record);
- noise keeps: every keep and its parent are trained again with fresh seeds through the runner and scored by
  the trusted evaluator; a keep whose fresh mean does not beat its parent's mean (the parent's runs of the night
  pooled with its fresh ones) by NOISE_KEEP_SES standard errors of the difference is a noise keep (a change that
  does nothing beats its parent half the time: "fresh gain > 0" passed those);
- holdout retention: on the fresh runs of the baseline and the best (recheck_seeds of each, every one's weights
  scored on val and on the holdout split), the held-out gain over the val gain: the same runs on both splits, each
  side a mean over several seeds' weights (the night's own searched mean against one seed's holdout would mix
  the noise of one with the selection of the other);
- keeps, keep rate and experiments per hour of the loop's wall clock.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time

from pydantic import BaseModel, computed_field

from agent.judging.noise import fresh_seed
from agent.judging.verify import Untrusted, score_run
from agent.recording.history import History
from agent.recording.ledger import read_records
from agent.recording.record import ExperimentRecord, RunEntry
from agent.running.runner import Runner
from agent.settings import LoopSettings
from agent.steps.training import hard_timeout
from agent.workspace import Workspace
from trainer.runs.jobs import Job
from trainer.runs.run_id import RunId, RunKind

# Re-check runs are numbered from here, clear of the loop's own re-runs of an experiment (0003.rerun1, ...).
RECHECK_RUN_NUMBER = 100
NOISE_KEEP_SES = 2.0  # a keep is real when its fresh gain over its parent exceeds this many standard errors


class NightFailed(Exception):
    """A night could not be measured; the message says which run and where its log is."""


class KeepCheck(BaseModel):
    """A keep trained again beside its parent."""
    keep: str                   # the keep's experiment id
    parent: str                 # its parent's experiment id
    description: str
    decided_gain: float | None  # the gain the loop kept it on
    fresh: list[float]          # the keep's fresh runs
    parent_runs: list[float]    # the parent's runs of the night and its fresh ones
    gain: float                 # mean(parent_runs) - mean(fresh)

    @computed_field
    @property
    def standard_error(self) -> float:
        """Welch's standard error of the difference of the two means (a side of one run takes the other's sd)."""
        sides = [self.fresh, self.parent_runs]
        variances = [statistics.variance(values) if len(values) > 1 else None for values in sides]
        known = [v for v in variances if v is not None]
        if not known:
            return 0.0
        return math.sqrt(sum((v if v is not None else statistics.fmean(known)) / len(values)
                             for v, values in zip(variances, sides, strict=True)))

    @computed_field
    @property
    def noise(self) -> bool:
        return not self.gain > NOISE_KEEP_SES * self.standard_error


class NightQuality(BaseModel):
    proposer: str
    seed: int
    stopped: str                  # why the loop stopped
    experiments: int              # decided after the baseline
    keeps: int                    # after the baseline
    keep_rate: float | None
    gain: float                   # baseline mean - best mean, on the searched val split, the night's runs
    fresh_gain: float             # the same on the fresh runs of each
    holdout_gain: float           # the same fresh runs' weights, on the holdout split
    retention: float | None       # holdout_gain / fresh_gain, where the fresh runs gained
    noise_keeps: int
    checks: list[KeepCheck]
    night_s: float                # the loop's wall clock
    check_s: float                # re-training and confirming afterwards
    experiments_per_hour: float


def keep_gain(fresh: list[float], parent_night: list[float], parent_fresh: list[float]) -> float:
    """The parent's mean (its runs of the night pooled with its fresh ones) minus the keep's fresh mean."""
    if not fresh or not parent_night + parent_fresh:
        raise ValueError("a keep's gain needs fresh runs of the keep and at least one run of its parent")
    return statistics.fmean(parent_night + parent_fresh) - statistics.fmean(fresh)


def kept_pairs(records: list[ExperimentRecord]) -> list[tuple[ExperimentRecord, ExperimentRecord]]:
    """Every keep after the baseline with the keep it was trained on."""
    kept = History(records).kept()
    by_commit = {r.commit: r for r in kept}
    for keep in kept[1:]:
        if keep.parent not in by_commit:
            raise NightFailed(f"keep {keep.id} was trained on {keep.parent}, which no keep of the ledger has")
    return [(keep, by_commit[keep.parent]) for keep in kept[1:]]


def check_keeps(records: list[ExperimentRecord], fresh: dict[str, list[float]]) -> list[KeepCheck]:
    """Each keep against its parent, from the fresh runs of each kept commit (fresh[commit])."""
    history = History(records)
    return [KeepCheck(keep=keep.id, parent=parent.id, description=keep.description,
                      decided_gain=keep.evidence.gain, fresh=fresh[keep.commit],
                      parent_runs=history.runs_of(parent.commit) + fresh[parent.commit],
                      gain=keep_gain(fresh[keep.commit], history.runs_of(parent.commit), fresh[parent.commit]))
            for keep, parent in kept_pairs(records)]


def retrain(workspace: Workspace, runner: Runner, record: ExperimentRecord, seeds: list[int],
            settings: LoopSettings) -> list[RunEntry]:
    """The kept commit trained with each seed, each run's weights scored by the trusted evaluator on val and on
    the holdout split."""
    values = []
    for number, seed in enumerate(seeds, RECHECK_RUN_NUMBER + 1):
        job = Job(run=RunId(experiment=record.id, kind=RunKind.RERUN, n=number), commit=record.commit, seed=seed,
                  timeout=hard_timeout(workspace.track.constants, settings))
        result = dataclasses.replace(runner.run(workspace, job), run=job.run)  # which run it was, for its check
        run = RunEntry.of(result, seed, workspace.dir)
        if run.val_bpb is None:
            raise NightFailed(f"re-training {record.id} ({record.description}) with seed {seed} failed "
                              f"({run.triage}): see {workspace.dir / run.log}")
        try:
            score_run(workspace, runner, record.commit, run, splits=("val", "holdout"))
        except Untrusted as err:
            raise NightFailed(f"re-training {record.id} with seed {seed}: {err}") from err
        values.append(run)
    return values


def measure_night(workspace: Workspace, runner: Runner, settings: LoopSettings, proposer: str, seed: int,
                  stopped: str, night_s: float, recheck_seeds: int) -> NightQuality:
    """The night's quality; trains every keep and its parent recheck_seeds more times."""
    started = time.monotonic()
    records = read_records(workspace.dir)
    first_seed = fresh_seed(records, settings.seed)
    fresh: dict[str, list[RunEntry]] = {}
    for keep, parent in kept_pairs(records):
        for record in (parent, keep):
            if record.commit not in fresh:
                seeds = list(range(first_seed, first_seed + recheck_seeds))
                first_seed += recheck_seeds
                fresh[record.commit] = retrain(workspace, runner, record, seeds, settings)
    checks = check_keeps(records, {commit: [run.val_bpb for run in runs] for commit, runs in fresh.items()})
    history = History(records)
    experiments, keeps = history.experiments()[1:], len(history.kept()) - 1
    baseline, best = history.kept()[0], history.best()
    gain = statistics.fmean(history.runs_of(baseline.commit)) - statistics.fmean(history.runs_of(best.commit))
    fresh_gain, holdout_gain = (
        statistics.fmean(score(r) for r in fresh.get(baseline.commit, [])) -
        statistics.fmean(score(r) for r in fresh.get(best.commit, []))
        for score in (lambda r: r.val_bpb, lambda r: r.holdout_bpb)) if keeps else (0.0, 0.0)
    return NightQuality(proposer=proposer, seed=seed, stopped=stopped, experiments=len(experiments), keeps=keeps,
                        keep_rate=keeps / len(experiments) if experiments else None, gain=gain,
                        fresh_gain=fresh_gain, holdout_gain=holdout_gain,
                        retention=holdout_gain / fresh_gain if fresh_gain > 0 else None,
                        noise_keeps=sum(check.noise for check in checks), checks=checks, night_s=night_s,
                        check_s=time.monotonic() - started,
                        experiments_per_hour=len(experiments) * 3600 / night_s if night_s > 0 else 0.0)
