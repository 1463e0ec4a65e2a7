"""Held-out confirmation: does the searched gain survive on text no decision ever read?

The baseline and the best were scored on the val split, which every keep/discard decision
read. Their saved weights are scored again, on val and on the holdout split, by
trainer/evaluate.py in a sandboxed process of its own (agent/running/evaluator.py); confirmation.json
records both gains.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from agent.recording.confirmation import Confirmation, ConfirmedCommit
from agent.recording.history import History
from agent.recording.ledger import read_records
from agent.recording.record import ExperimentRecord
from agent.running.evaluator import EvaluationFailed
from agent.running.jobs import EvaluationJob
from agent.running.runner import LocalRunner, Runner
from agent.workspace import Workspace
from trainer.evaluation import Evaluation
from trainer.run_id import RunId


class ConfirmError(Exception):
    """Confirmation is not possible; the message says why and what to do."""


def confirm(workspace: Workspace, runner: Runner | None = None, timeout: float = 1800.0) -> Confirmation:
    """Scores the baseline's and the best's weights on val and holdout; writes confirmation.json."""
    history = History(read_records(workspace.dir))
    kept = history.kept()
    if not kept:
        raise ConfirmError(f"{workspace.tag} has no kept experiment yet: run the loop first")
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    scored = {record.id: record for record in (kept[0], history.best())}  # the best may still be the baseline
    runner = runner or LocalRunner()
    with ThreadPoolExecutor(max_workers=len(scored), thread_name_prefix="confirm") as pool:  # side by side
        scorings = {id_: pool.submit(evaluate_saved, workspace, runner, record, timeout)
                    for id_, record in scored.items()}
    evaluated: dict[str, Evaluation] = {id_: scoring.result() for id_, scoring in scorings.items()}
    confirmed: list[ConfirmedCommit] = []
    for record in (kept[0], history.best()):
        evaluation = evaluated[record.id]
        runs = history.runs_of(record.commit)
        confirmed.append(ConfirmedCommit(id=record.id, commit=record.commit, description=record.description,
                                         search_val=statistics.fmean(runs) if runs else record.val_bpb,
                                         runs=len(runs), val=evaluation.val, holdout=evaluation.holdout))
    baseline, best = confirmed
    confirmation = Confirmation(time=started, sigma=history.sigma(), baseline=baseline, best=best,
                                search_gain=baseline.search_val - best.search_val,
                                holdout_gain=baseline.holdout - best.holdout)
    confirmation.write(workspace.dir)
    return confirmation


def evaluate_saved(workspace: Workspace, runner: Runner, record: ExperimentRecord, timeout: float) -> Evaluation:
    if not record.checkpoint or not (workspace.dir / record.checkpoint).is_file():
        raise ConfirmError(f"experiment {record.id} has no saved weights (checkpoints/ keeps only the baseline's "
                           "and the best's, and only runs that called prepare.evaluate_bpb save them): run the "
                           "loop on to a new best, then confirm again")
    try:
        return runner.evaluate(workspace, EvaluationJob(run=RunId.confirm(record.id), commit=record.commit,
                                                        checkpoint=workspace.dir / record.checkpoint,
                                                        splits=("val", "holdout"), timeout=timeout))
    except EvaluationFailed as err:
        raise ConfirmError(f"confirming experiment {record.id}: {err}") from err
