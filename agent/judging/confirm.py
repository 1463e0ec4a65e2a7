"""Held-out confirmation: does the searched gain survive on text no decision ever read?

The baseline and the best were scored on the val split, which every keep/discard decision
read. Their saved weights are scored again, on val and on the holdout split, by
trainer/evaluate.py in a sandboxed process of its own (agent/running/evaluator.py); confirmation.json
records both gains.
"""

from __future__ import annotations

import statistics
import time

from agent.judging.noise import commit_runs, current_sigma
from agent.recording.ledger import read_records
from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.running.evaluator import EvaluationFailed
from agent.running.runner import LocalRunner, Runner
from agent.workspace import Workspace
from trainer.atomic import write_json_atomic


class ConfirmError(Exception):
    """Confirmation is not possible; the message says why and what to do."""


def confirm(workspace: Workspace, runner: Runner | None = None, timeout: float = 1800.0) -> dict:
    """Scores the baseline's and the best's weights on val and holdout; writes confirmation.json."""
    records = read_records(workspace.dir)
    kept = [r for r in records if r.status == ExperimentStatus.KEEP]
    if not kept:
        raise ConfirmError(f"{workspace.tag} has no kept experiment yet: run the loop first")
    out: dict = dict(time=time.strftime("%Y-%m-%dT%H:%M:%S%z"), sigma=current_sigma(records))
    scored: dict[str, dict] = {}
    for role, record in (("baseline", kept[0]), ("best", kept[-1])):
        if record.id not in scored:  # the best may still be the baseline
            scored[record.id] = evaluate_saved(workspace, runner or LocalRunner(), record, timeout)
        scores = scored[record.id]
        runs = commit_runs(records, record.commit)
        out[role] = dict(id=record.id, commit=record.commit, description=record.description,
                         search_val=statistics.fmean(runs) if runs else record.val_bpb, runs=len(runs),
                         val=scores["val"], holdout=scores["holdout"])
    out["search_gain"] = out["baseline"]["search_val"] - out["best"]["search_val"]
    out["holdout_gain"] = out["baseline"]["holdout"] - out["best"]["holdout"]
    write_json_atomic(workspace.dir / "confirmation.json", out)
    return out


def evaluate_saved(workspace: Workspace, runner: Runner, record: ExperimentRecord, timeout: float) -> dict[str, float]:
    if not record.checkpoint or not (workspace.dir / record.checkpoint).is_file():
        raise ConfirmError(f"experiment {record.id} has no saved weights (checkpoints/ keeps only the baseline's "
                           "and the best's, and only runs that called prepare.evaluate_bpb save them): run the "
                           "loop on to a new best, then confirm again")
    try:
        return runner.evaluate(workspace, record.commit, workspace.dir / record.checkpoint,
                               f"confirm-{record.id}", ("val", "holdout"), timeout=timeout)
    except EvaluationFailed as err:
        raise ConfirmError(f"confirming experiment {record.id}: {err}") from err
