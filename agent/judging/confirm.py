"""Held-out confirmation: does the searched gain survive on text no decision ever read?

Every keep of the night was scored on the val split, which every keep/discard decision read. Their saved
weights are scored again, on val and on the holdout split, by trainer/evaluator/evaluate.py in a sandboxed process of
its own (agent/running/evaluator.py); confirmation.json records each keep's scores in order and the baseline's
and the best's gains. Two things are flagged: a keep that got worse on holdout than the keep before it by more
than REGRESSION_SIGMAS sigma (a change that undid an earlier gain and was kept against a bar that had moved),
a keep whose own val gain the holdout split clearly does not show, and a searched gain the holdout split keeps
clearly less than HOLDOUT_SHARE of (a night that learnt val).
"""

from __future__ import annotations

import math
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from agent.judging.decisions import HOLDOUT_SHARE
from agent.judging.noise import USUAL_SIGMA
from agent.recording.confirmation import Confirmation, ConfirmedCommit
from agent.recording.history import History
from agent.recording.ledger import read_records
from agent.recording.record import ExperimentRecord
from agent.running.evaluator import EvaluationFailed
from agent.running.runner import LocalRunner, Runner
from agent.workspace import Workspace
from trainer.evaluator.evaluation import Evaluation
from trainer.runs.jobs import EvaluationJob
from trainer.runs.run_id import RunId


class ConfirmError(Exception):
    """Confirmation is not possible; the message says why and what to do."""


REGRESSION_SIGMAS = 2.0


def confirm(workspace: Workspace, runner: Runner | None = None, timeout: float = 1800.0) -> Confirmation:
    """Scores every keep's weights on val and holdout, two side by side; writes confirmation.json."""
    history = History(read_records(workspace.dir))
    if not (kept := history.kept()):
        raise ConfirmError(f"{workspace.tag} has no kept experiment yet: run the loop first")
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    best_record = history.best()
    required = (kept[0].id, best_record.id)  # a keep between them whose weights are gone is left out
    chain = [r for r in kept if r.id in required or (r.checkpoint and (workspace.dir / r.checkpoint).is_file())]
    runner = runner or LocalRunner()
    with ThreadPoolExecutor(max_workers=min(2, len(chain)), thread_name_prefix="confirm") as pool:
        scorings = [pool.submit(evaluate_saved, workspace, runner, record, timeout) for record in chain]
    confirmed = []
    for record, scoring in zip(chain, scorings, strict=True):
        evaluation, runs = scoring.result(), history.runs_of(record.commit)
        confirmed.append(ConfirmedCommit(id=record.id, commit=record.commit, description=record.description,
                                         search_val=statistics.fmean(runs) if runs else record.val_bpb,
                                         runs=len(runs), val=evaluation.val, holdout=evaluation.holdout))
    baseline, best = confirmed[0], next(c for c in confirmed if c.id == best_record.id)
    confirmation = Confirmation(time=started, sigma=history.sigma(), baseline=baseline, best=best,
                                search_gain=baseline.search_val - best.search_val,
                                holdout_gain=baseline.holdout - best.holdout, chain=confirmed)
    confirmation.warnings = warnings_of(confirmation, history.sigma() or USUAL_SIGMA.get(workspace.track.track))
    confirmation.write(workspace.dir)
    return confirmation


def warnings_of(confirmation: Confirmation, sigma: float | None) -> list[str]:
    """The warnings the module docstring lists; sigma: the noise floor's, else the track's usual."""
    said, margin = [], REGRESSION_SIGMAS * (sigma or 0.0) * math.sqrt(2)
    for before, after in zip(confirmation.chain, confirmation.chain[1:], strict=False):
        worse = after.holdout - before.holdout
        if sigma and worse > REGRESSION_SIGMAS * sigma:
            said.append(f"{after.id} ({after.description}) is worse than {before.id} before it on holdout by "
                        f"{worse:.6f}, more than {REGRESSION_SIGMAS:g} sigma ({REGRESSION_SIGMAS * sigma:.6f}): "
                        "it undid a gain the search credited")
        searched = before.search_val - after.search_val
        if sigma and searched > REGRESSION_SIGMAS * sigma and -worse < HOLDOUT_SHARE * searched - margin:
            said.append(f"{after.id} ({after.description}) gained {searched:.6f} on val over {before.id} but "
                        f"{-worse:.6f} on holdout, short of {100 * HOLDOUT_SHARE:.0f}% of it by more than "
                        f"{margin:.6f}: a gain of val, not of a better model")
    # Honest nights keep about half and more (the demo 55%, a cpu night 152%): the line is half, less the
    # noise of two single scorings, so that an honest night near it is not flagged and one far below it is.
    retention, gain = confirmation.retention, confirmation.search_gain
    if retention is not None and gain > REGRESSION_SIGMAS * (sigma or 0.0) \
            and confirmation.holdout_gain < HOLDOUT_SHARE * gain - margin:
        said.append(f"the holdout split keeps {100 * retention:.0f}% of the searched gain "
                    f"({confirmation.holdout_gain:+.6f} of {gain:+.6f}), short of {100 * HOLDOUT_SHARE:.0f}% by more "
                    f"than {margin:.6f} (2 sigma of two scorings): part of the night's gain is val, not a better "
                    "model")
    return said


def evaluate_saved(workspace: Workspace, runner: Runner, record: ExperimentRecord, timeout: float) -> Evaluation:
    if not record.checkpoint or not (workspace.dir / record.checkpoint).is_file():
        raise ConfirmError(f"experiment {record.id} has no saved weights (only runs that called "
                           "prepare.evaluate_bpb save them): run the loop on to a new best, then confirm again")
    try:
        return runner.evaluate(workspace, EvaluationJob(run=RunId.confirm(record.id), commit=record.commit,
                                                        checkpoint=workspace.dir / record.checkpoint,
                                                        splits=("val", "holdout"), timeout=timeout))
    except EvaluationFailed as err:
        raise ConfirmError(f"confirming experiment {record.id}: {err}") from err
