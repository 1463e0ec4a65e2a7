"""The keep procedure: how one trained experiment becomes a verdict.

Its first run is judged by the noise rule (agent/judging/noise.py) against the best's standing (agent/judging/
decisions.py); a change that removed code may win as a simplification (simplify.py). A verdict that could keep
is taken again on the trusted numbers (verify.py): every run scored from its sealed weights, a run whose number
cannot stand turning the experiment into a tamper crash. A would-be keep waits for its turn to land (one at a
time) and, if its parent stopped being the best meanwhile, goes back to be re-based before more is spent on it.
A close call is trained again with a fresh seed until the mean decides; a would-be keep with too large a fall
is trained again from scratch and held to the holdout split (decisions.py, IMPLAUSIBLE_FALL).

The steps of the experiment (agent/steps/experiment.py) train and land; this decides.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from agent.judging.decisions import Standing, decide, holdout_disagrees, implausible_fall, step_disagrees, tamper
from agent.judging.keep_rule import KeepRule
from agent.judging.noise import CLOSE, DISCARD, KEEP, USUAL_SIGMA, Judgement
from agent.judging.simplify import simplify_or_discard
from agent.judging.verify import Untrusted, score_runs, trusted, verification_evidence
from agent.recording.history import History
from agent.recording.record import Evidence, ExperimentRecord
from agent.recording.transcript import Transcript
from agent.running.evaluator import EvaluationFailed
from agent.running.runner import Runner, RunResult
from agent.workspace import Workspace
from trainer.runs.jobs import EvaluationJob
from trainer.runs.run_id import RunId
from trainer.runs.triage import Triage

HOLDOUT_SPLITS = ("val", "holdout")


@dataclass
class Case:
    """An experiment before the procedure, and what the steps do for it when asked."""
    record: ExperimentRecord                  # its draft: its commit, parent and runs so far
    best: ExperimentRecord | None             # the best it is judged against (None: the baseline)
    result: RunResult                         # its last run
    transcript: Transcript
    train_again: Callable[[str], RunResult]   # one more run of its commit, with a fresh seed, added to its runs
    wait_to_land: Callable[[str], None]       # returns once it is the one candidate to move the best
    best_moved: Callable[[], bool]            # whether its parent is no longer the best


class KeepProcedure:
    def __init__(self, workspace: Workspace, runner: Runner, rule: KeepRule, history: Callable[[], History]):
        self.workspace, self.runner, self.rule, self.history = workspace, runner, rule, history

    def judge(self, case: Case) -> Judgement:
        """The verdict; a would-be keep (or close call) whose parent stopped being the best is returned as judged
        so far, to be re-based."""
        judgement = self._decide(case, case.result)
        if judgement.status in (KEEP, CLOSE) and case.best is not None:
            case.wait_to_land(str(judgement.status))
            if case.best_moved():
                return judgement
        suspicion, anchor = None, self.history().holdout_anchor() if case.best is not None else None
        while judgement.status == CLOSE or (judgement.status == KEEP and suspicion is None
                                            and implausible_fall(case.record.runs, anchor)):
            if judgement.status == CLOSE:
                judgement = self._again(case, judgement.reason)
            else:  # too large a fall, in any run, a close call's re-runs included
                suspicion = implausible_fall(case.record.runs, anchor)
                judgement = self._holdout_gate(case, self._again(case, suspicion, HOLDOUT_SPLITS), anchor)
        if suspicion:
            judgement.evidence.implausible_fall = suspicion
            judgement.reason += f"; flagged: {suspicion}, so it was trained again from scratch"
        if any(run.check for run in case.record.runs):
            judgement.evidence.verification = verification_evidence(case.record.runs)
        if judgement.status == KEEP:
            judgement.reason += "; verified: the trusted evaluator scored the sealed weights"
        judgement.reason += "".join(f"; salvaged: the run with seed {run.seed} died after its seal "
                                    f"({run.salvaged_from}), so its number is the trusted evaluator's score of its "
                                    "sealed weights" for run in case.record.runs if run.salvaged)
        return judgement

    def _decide(self, case: Case, result: RunResult, splits: tuple[str, ...] = ("val",)) -> Judgement:
        """The verdict on the numbers of record; one that could keep is taken again once the trusted evaluator has
        scored every run (a run whose number cannot stand makes the experiment a tamper crash)."""
        judgement = self._verdict(case, result)
        runs = case.record.runs
        if judgement.status not in (KEEP, CLOSE) or (all(map(trusted, runs)) and len(splits) == 1):
            return judgement
        try:
            score_runs(self.workspace, self.runner, case.record.commit, runs, splits, baseline=case.best is None)
        except Untrusted as err:
            case.transcript.event("verification", passed=False, problem=str(err),
                                  **verification_evidence(runs).as_written())
            return tamper(judgement, str(err), runs)
        case.transcript.event("verification", passed=True, problem=None, **verification_evidence(runs).as_written())
        return self._verdict(case, result)

    def _verdict(self, case: Case, result: RunResult) -> Judgement:
        standing = Standing.of(self.history(), case.best)
        judgement = decide(result, standing, case.record.runs, self.rule)
        if case.best is None:
            return judgement
        return simplify_or_discard(judgement, self.workspace.file_at("train.py", case.record.parent),
                                   self.workspace.file_at("train.py", case.record.commit), case.record.runs, standing)

    def _again(self, case: Case, why: str, splits: tuple[str, ...] = ("val",)) -> Judgement:
        again = case.train_again(why)
        if again.verdict.triage != Triage.OK:
            return Judgement(DISCARD, f"the re-run crashed ({again.verdict.triage.value}: {again.verdict.reason}): "
                                      "the gain did not reproduce",
                             Evidence(candidate_runs=[r.val_bpb for r in case.record.runs]))
        return self._decide(case, again, splits)

    def _holdout_gate(self, case: Case, judgement: Judgement, anchor: ExperimentRecord) -> Judgement:
        """A keep after an implausible fall, if the holdout split shows the fall from anchor too, and its own step
        from the best as well where the best is not the anchor (else honest keeps in between would carry a step
        that learnt val); else tamper."""
        if judgement.status != KEEP or not anchor.checkpoint:
            return judgement
        references = [anchor] + ([case.best] if case.best.id != anchor.id and case.best.checkpoint else [])
        try:
            with ThreadPoolExecutor(max_workers=len(references), thread_name_prefix="holdout-gate") as pool:
                scored = list(pool.map(lambda r: self.runner.evaluate(self.workspace, EvaluationJob(
                    run=RunId.verify_best(case.record.id, r.id), commit=r.commit,
                    checkpoint=self.workspace.dir / r.checkpoint, splits=HOLDOUT_SPLITS, probe=True)), references))
        except EvaluationFailed as err:
            return tamper(judgement, f"a reference's weights could not be scored on the holdout split: {err}",
                          case.record.runs)
        problem = holdout_disagrees(case.record.runs, scored[0].val, scored[0].holdout)
        if problem is None and len(scored) == 2:
            sigma = Standing.of(self.history(), case.best).sigma or USUAL_SIGMA.get(self.workspace.track.track)
            problem = step_disagrees(case.record.runs, case.best.id, scored[1].val, scored[1].holdout, sigma)
        case.transcript.event("holdout_gate", passed=problem is None, problem=problem, anchor=anchor.id,
                              best_val=scored[0].val, best_holdout=scored[0].holdout,
                              step_from=case.best.id if len(scored) == 2 else None,
                              step_val=scored[-1].val, step_holdout=scored[-1].holdout)
        return tamper(judgement, problem, case.record.runs) if problem else judgement
