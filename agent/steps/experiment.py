"""One experiment, in a thread of its own: propose -> commit -> train -> judge -> record.

It is proposed against the best of the moment, told what else is in flight. It waits for a
training place (the loop admits it), is committed on the best without moving the branch
(re-applied first if the best moved while it was proposed), trained, and judged against the
parent it was trained on. If another experiment was kept meanwhile and this one would be kept
(or is a close call) against its old parent, its edits are re-applied on the new best and it is
trained and judged again (at most MAX_REBASES times); if they no longer apply it is recorded as
superseded. Would-be keeps are settled one at a time (agent/steps/sharing.py, LandingLane), so that one
re-based on the new best is not overtaken by another while it trains again. The check that its
parent is still the best and the keep (ledger row, branch moved) happen in one step under the
loop's lock, so a keep is never judged against an old best.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.judging.decisions import decide, holdout_disagrees, implausible_fall, tamper
from agent.judging.noise import CLOSE, CRASH, DISCARD, KEEP, Judgement
from agent.judging.simplify import simplify_or_discard
from agent.judging.verify import Untrusted, score_runs, trusted, verification_evidence
from agent.llm.types import Usage
from agent.proposers.base import Proposer, Running
from agent.proposers.edits import EditRejected
from agent.proposers.night_facts import NightFacts
from agent.proposers.proposing import Obtained, Program, Proposing
from agent.recording.notes import record_with_keep
from agent.recording.record import (
    Evidence,
    ExperimentRecord,
    ExperimentStatus,
    InFlight,
    LlmUsage,
    ProgramRef,
    RebasedFrom,
    RunEntry,
    Timings,
    now,
    summary_number,
)
from agent.recording.transcript import Transcript
from agent.running.evaluator import EvaluationFailed
from agent.running.runner import Runner
from agent.settings import LoopSettings
from agent.steps.fixing import Fixing, Trained
from agent.steps.sharing import Shared, Stopping
from agent.steps.training import LoopStopped, Training
from agent.untrusted import bounded
from agent.workspace import Workspace
from trainer.triage import Triage

PROPOSING, READY, TRAINING, JUDGING = "proposing", "ready", "training", "judging"
MAX_REBASES = 3  # re-applications on a newer best before an experiment is recorded as superseded


@dataclass
class Experiment:
    """One experiment as it moves through the steps; each step fills in its part."""
    id: str
    transcript: Transcript
    program: Program
    clock: float                    # time.monotonic() at its start
    facts: NightFacts               # the budget left and the keep rule, as the proposer is told
    best: ExperimentRecord | None = None   # the best it is judged against (None: this is the baseline)
    parent: str = ""                # that best's commit
    phase: str = PROPOSING
    admitted: threading.Event = field(default_factory=threading.Event)  # it may train now
    admitted_at: float | None = None
    abandoned: str | None = None    # why it will never train (the loop stopped starting experiments)
    obtained: Obtained | None = None
    in_flight: InFlight | None = None
    trained: Trained | None = None
    runs: list[RunEntry] = field(default_factory=list)
    judgement: Judgement | None = None
    rebased_from: list[RebasedFrom] = field(default_factory=list)
    earlier_run_seconds: float = 0.0  # training on parents that stopped being the best
    thread_id: int | None = None      # the thread that runs its steps
    spend: Usage = field(default_factory=Usage)  # the proposal being made: what it has spent so far
    holds_slot_from: float | None = None  # time.monotonic() once it was both proposed and admitted

    def admit(self, why_not: str | None = None) -> None:
        self.abandoned, self.admitted_at = why_not, time.monotonic()
        self.admitted.set()

    def running(self) -> Running | None:
        """What a proposal made meanwhile is told about it."""
        if self.obtained is None and self.phase == PROPOSING and self.best is not None:
            return Running(self.id, "being proposed now, in a conversation of its own (its change is not known "
                                    "yet)", None)
        if self.obtained is None or self.obtained.base_commit is None:
            return None
        proposal = self.obtained.proposal
        return Running(self.id, bounded(proposal.description), proposal.meta.get("proposer"),
                       bounded(proposal.hypothesis))


class Steps:
    """The steps of one experiment; `moved(experiment)` tells the loop its phase changed, `others(experiment)`
    what else is in flight, and `floor_ready` is set once the first noise floor is measured."""

    def __init__(self, workspace: Workspace, proposer: Proposer, runner: Runner, settings: LoopSettings,
                 shared: Shared, moved: Callable[[Experiment], None],
                 others: Callable[[Experiment], list[Running]], floor_ready: threading.Event):
        self.workspace, self.proposer, self.runner, self.settings, self.shared = (workspace, proposer, runner,
                                                                                 settings, shared)
        self.ledger = shared.ledger
        self.moved, self.others, self.floor_ready = moved, others, floor_ready
        self.proposing = Proposing(workspace, self.ledger, proposer, shared.proposer_lock, shared.lock)
        self.training = Training(workspace, runner, settings, shared)
        self.fixing = Fixing(self.training, proposer, shared)

    def run(self, experiment: Experiment) -> ExperimentRecord | None:
        """Its ledger record; None when it never trained (abandoned) or the loop is stopping (it records it)."""
        try:
            if not self.propose(experiment):
                return None
            self.commit(experiment)
            self.train(experiment)
            record = None
            while record is None:
                self._phase(experiment, JUDGING)
                self.judge(experiment)
                record = self.settle(experiment)
                if record is None:
                    record = self.rebase(experiment)
            self.shared.lane.leave(experiment.id)  # before conclude, which may wait for a proposal in progress
            self.conclude(experiment, record)
            return record
        except Stopping:
            return None
        finally:
            self.shared.lane.leave(experiment.id)

    def _phase(self, experiment: Experiment, phase: str) -> None:
        experiment.phase = phase
        self.moved(experiment)

    # -- proposing and committing -----------------------------------------------------------------

    def propose(self, experiment: Experiment) -> bool:
        """The proposal against the best of the moment; then it waits to be admitted. False: abandoned."""
        self._propose_on_best(experiment)
        proposed = time.monotonic()
        self._phase(experiment, READY)
        while not experiment.admitted.wait(0.2):
            self.shared.check()
        if experiment.abandoned is not None:
            self.proposing.abandon(experiment.id, experiment.obtained, experiment.transcript, experiment.abandoned)
            return False
        experiment.obtained.wait_seconds = max(0.0, proposed - experiment.admitted_at)
        experiment.holds_slot_from = max(proposed, experiment.admitted_at)
        return True

    def _propose_on_best(self, experiment: Experiment) -> None:
        # the best and what is in flight as they are when its conversation opens
        with self.shared.conversations.held(experiment.id, self.shared.check), self.shared.proposer_turn():
            with self.shared.lock:
                best, head = self.ledger.best(), self.workspace.head()
                train_source = self.workspace.file_at("train.py", head)
            experiment.best, experiment.parent = best, head
            if best is None:
                experiment.obtained = self.proposing.baseline(train_source, experiment.transcript)
                return
            others = [r for r in self.others(experiment) if r is not None]
            experiment.spend = Usage()
            experiment.obtained = self.proposing.propose(experiment.id, best, train_source, experiment.program,
                                                         experiment.transcript, experiment.facts, others,
                                                         experiment.spend)

    def commit(self, experiment: Experiment) -> None:
        """Committed on the best (re-applied, or proposed again, if the best moved since the proposal) and its
        in-flight marker written; the baseline runs its parent."""
        while True:
            with self.shared.lock:
                self.shared.check()
                best, head = self.ledger.best(), self.workspace.head()
                obtained = experiment.obtained
                if experiment.best is not None and head != experiment.parent:
                    obtained = self.proposing.reapplied(experiment.id, experiment.obtained, best,
                                                        self.workspace.file_at("train.py", head),
                                                        experiment.transcript)
                if obtained is not None:
                    if experiment.best is not None:
                        experiment.best, experiment.parent = best, head
                    experiment.obtained = obtained
                    self._begin(experiment)
                    break
            self.proposing.told_unused(experiment.id, experiment.obtained)
            self._phase(experiment, PROPOSING)
            waited = time.monotonic()
            self._propose_on_best(experiment)  # the best moved and the edits no longer apply: propose again
            experiment.obtained.wait_seconds = time.monotonic() - waited
        self._phase(experiment, TRAINING)

    def _begin(self, experiment: Experiment) -> None:
        best, parent, obtained = experiment.best, experiment.parent, experiment.obtained
        description = bounded(obtained.proposal.description)
        commit = parent if best is None else self.workspace.commit_train(obtained.source,
                                                                         f"{experiment.id}: {description}", parent)
        experiment.transcript.event("committed", commit=commit, parent=parent,
                                    diff="" if best is None else self.workspace.diff(parent, commit))
        # The baseline runs with the base seed; every later run with a seed no run of this tag used, so that
        # no experiment is compared on a seed that is systematically luckier or unluckier than the mean.
        seed = self.settings.seed if best is None else self.shared.seed()
        in_flight = InFlight(id=experiment.id, commit=commit, parent=parent, description=description,
                             started=now(), pid=os.getpid(), proposal=obtained.proposal.meta,
                             program=experiment.program.name, seed=seed)
        self.shared.begin(in_flight)
        experiment.in_flight = in_flight

    # -- training and judging ---------------------------------------------------------------------

    def train(self, experiment: Experiment, name: str | None = None) -> None:
        experiment.trained = self.fixing.train(experiment.in_flight, experiment.obtained.source,
                                               experiment.transcript, can_fix=experiment.best is not None,
                                               name=name)

    def judge(self, experiment: Experiment) -> None:
        """The verdict on the trusted numbers: re-runs for close calls and implausible falls. A would-be keep whose
        parent stopped being the best is left to be re-based before more is spent on it."""
        result = experiment.trained.result
        experiment.runs = [RunEntry.of(result, experiment.in_flight.seed, self.workspace.dir)]
        if experiment.best is not None:
            while not self.floor_ready.wait(0.2):  # the first noise floor decides how results are compared
                self.shared.check()
        judgement = self._decide(experiment, result)
        if judgement.status in (KEEP, CLOSE) and experiment.best is not None:
            self.shared.lane.enter(experiment.id, self.shared.check, lambda ahead: experiment.transcript.event(
                "waiting_to_land", behind=ahead, judged=str(judgement.status)))
        if judgement.status in (KEEP, CLOSE) and self._best_moved(experiment):
            experiment.judgement = judgement
            return
        # A fall too large for one change is never kept on one number: trained again from scratch, flagged, and
        # kept only if the holdout split shows the fall too.
        suspicion = implausible_fall(experiment.runs, experiment.best) if judgement.status == KEEP else None
        if suspicion:
            judgement = self._holdout_gate(experiment, self._train_again(experiment, suspicion, ("val", "holdout")))
        while judgement.status == CLOSE:
            judgement = self._train_again(experiment, judgement.reason)
        if suspicion:
            judgement.evidence.implausible_fall = suspicion
            judgement.reason += f"; flagged: {suspicion}, so it was trained again from scratch"
        if any(run.check for run in experiment.runs):
            judgement.evidence.verification = verification_evidence(experiment.runs)
        if judgement.status == KEEP:
            judgement.reason += "; verified: the trusted evaluator scored the sealed weights"
        experiment.judgement = judgement

    def _best_moved(self, experiment: Experiment) -> bool:
        with self.shared.lock:
            return experiment.best is not None and self.workspace.head() != experiment.parent

    def _decide(self, experiment: Experiment, result, splits: tuple[str, ...] = ("val",)) -> Judgement:
        """The verdict on the numbers of record; one that could keep is taken again once the trusted evaluator has
        scored every run (a run whose number cannot stand makes the experiment a tamper crash)."""
        judgement = self._verdict(experiment, result)
        if judgement.status not in (KEEP, CLOSE) or (all(map(trusted, experiment.runs)) and len(splits) == 1):
            return judgement
        try:
            score_runs(self.workspace, self.runner, experiment.trained.commit, experiment.runs, splits)
        except Untrusted as err:
            experiment.transcript.event("verification", passed=False, problem=str(err),
                                        **verification_evidence(experiment.runs))
            return tamper(judgement, str(err), experiment.runs)
        experiment.transcript.event("verification", passed=True, problem=None, **verification_evidence(experiment.runs))
        return self._verdict(experiment, result)

    def _verdict(self, experiment: Experiment, result) -> Judgement:
        judgement = decide(result, experiment.best, list(self.ledger.records), experiment.runs,
                           self.settings.keep_sigmas, self.settings.min_delta)
        if experiment.best is None:
            return judgement
        return simplify_or_discard(judgement, self.workspace.file_at("train.py", experiment.parent),
                                   self.workspace.file_at("train.py", experiment.trained.commit), experiment.runs,
                                   experiment.best, list(self.ledger.records))

    def _train_again(self, experiment: Experiment, why: str, splits: tuple[str, ...] = ("val",)) -> Judgement:
        seed = self.shared.seed(also_used=experiment.runs)
        experiment.transcript.event("rerun", seed=seed, reason=why)
        again = self.training.run(experiment.trained.commit, f"{experiment.id}.rerun{self._runs_so_far(experiment)}",
                                  seed, experiment.transcript)
        experiment.runs.append(RunEntry.of(again, seed, self.workspace.dir))
        experiment.trained.run_seconds += again.seconds
        if again.verdict.triage != Triage.OK:
            return Judgement(DISCARD, f"the re-run crashed ({again.verdict.triage.value}: {again.verdict.reason}): "
                                      "the gain did not reproduce",
                             Evidence(candidate_runs=[r.val_bpb for r in experiment.runs]))
        return self._decide(experiment, again, splits)

    def _holdout_gate(self, experiment: Experiment, judgement: Judgement) -> Judgement:
        """A keep after an implausible fall, if the holdout split shows the fall too; else tamper."""
        best = experiment.best
        if judgement.status != KEEP or best is None or not best.checkpoint:
            return judgement
        try:
            scores = self.runner.evaluate(self.workspace, best.commit, self.workspace.dir / best.checkpoint,
                                          f"verify-{experiment.id}-best-{best.id}", ("val", "holdout"), probe=True)
        except EvaluationFailed as err:
            return tamper(judgement, f"the best's weights could not be scored on the holdout split: {err}",
                          experiment.runs)
        problem = holdout_disagrees(experiment.runs, scores["val"], scores["holdout"])
        experiment.transcript.event("holdout_gate", passed=problem is None, problem=problem,
                                    best_val=scores["val"], best_holdout=scores["holdout"])
        return tamper(judgement, problem, experiment.runs) if problem else judgement

    @staticmethod
    def _runs_so_far(experiment: Experiment) -> int:
        """Numbers re-runs across re-bases, so that no log is written twice."""
        return len(experiment.runs) + sum(len(earlier.runs) for earlier in experiment.rebased_from)

    # -- recording --------------------------------------------------------------------------------

    def settle(self, experiment: Experiment) -> ExperimentRecord | None:
        """The ledger row, and the branch moved if kept, in one step under the lock; None when it would be kept
        (or is a close call) but its parent is no longer the best: then it is re-based."""
        with self.shared.lock:
            self.shared.check()
            if experiment.judgement.status in (KEEP, CLOSE) and self._best_moved(experiment):
                return None
            return self.record(experiment, experiment.judgement.status)

    def rebase(self, experiment: Experiment) -> ExperimentRecord | None:
        """Re-applies its edits on the new best and trains it again (None: judge again); superseded when they no
        longer apply or it was re-based MAX_REBASES times."""
        with self.shared.lock:
            self.shared.check()
            best, head = self.ledger.best(), self.workspace.head()
            experiment.rebased_from.append(RebasedFrom(parent=experiment.parent, commit=experiment.trained.commit,
                                                       runs=experiment.runs,
                                                       status=str(experiment.judgement.status)))
            experiment.earlier_run_seconds += experiment.trained.run_seconds
            experiment.transcript.event("rebase", from_parent=experiment.parent, onto=head,
                                        judged=str(experiment.judgement.status), reason=experiment.judgement.reason)
            if len(experiment.rebased_from) > MAX_REBASES:
                return self.record(experiment, ExperimentStatus.SUPERSEDED,
                                   f"it beat its parent, but the best moved on {MAX_REBASES} times while it was "
                                   "judged; it was not trained again")
            try:
                source = experiment.obtained.proposal.checked_against(self.workspace.file_at("train.py", head))
            except EditRejected as err:
                experiment.transcript.event("rebase_failed", onto=head, message=str(err))
                return self.record(experiment, ExperimentStatus.SUPERSEDED,
                                   f"it beat its parent {experiment.parent[:7]}, but the best moved to {head[:7]} "
                                   f"and its edits no longer apply there: {err}")
            experiment.obtained.source, experiment.obtained.rebased = source, True
            experiment.best, experiment.parent = best, head
            self._begin(experiment)
        self.train(experiment, name=f"{experiment.id}.rebase{len(experiment.rebased_from)}")
        return None

    def record(self, experiment: Experiment, status: ExperimentStatus, reason: str | None = None) -> ExperimentRecord:
        """The ledger row (under the lock); a keep moves the branch to its commit."""
        best, obtained, trained, judgement = experiment.best, experiment.obtained, experiment.trained, \
            experiment.judgement
        result, in_flight = trained.result, experiment.in_flight
        superseded = status == ExperimentStatus.SUPERSEDED
        runs = experiment.rebased_from[-1].runs if superseded else experiment.runs
        measured = [r.val_bpb for r in runs if r.val_bpb is not None]
        if status == KEEP:
            if best is not None:
                self.workspace.advance_to(trained.commit)
            record_with_keep(self.workspace.repo, trained.commit, self.workspace.dir)
        total = time.monotonic() - experiment.clock
        run_seconds = experiment.earlier_run_seconds + (0.0 if superseded else trained.run_seconds)
        record = ExperimentRecord(
            id=experiment.id, parent=experiment.parent, commit=trained.commit, status=status,
            triage=judgement.triage or result.verdict.triage.value,
            verified=status == KEEP and bool(runs) and all(run.trusted for run in runs if run.val_bpb is not None),
            reason=reason or judgement.reason, description=in_flight.description,
            val_bpb=statistics.fmean(measured) if measured and status != CRASH else None,
            runs=runs, evidence=judgement.evidence,
            checkpoint=str(result.checkpoint.relative_to(self.workspace.dir)) if status == KEEP and result.checkpoint
            else None,
            peak_vram_mb=summary_number(result.summary.get("peak_vram_mb")), summary=result.summary,
            architecture=result.model_config,
            returncode=result.returncode, timed_out=result.timed_out, frozen_changed=result.frozen_changed,
            proposed_against=obtained.base_commit, rebased=obtained.rebased,
            **({"rebased_from": experiment.rebased_from} if experiment.rebased_from else {}),
            timings=Timings(propose_s=round(obtained.propose_seconds, 3), wait_s=round(obtained.wait_seconds, 3),
                            run_s=round(run_seconds, 3), total_s=round(total, 3),
                            agent_s=round(max(0.0, total - obtained.wait_seconds - run_seconds), 3)),
            proposer=obtained.proposal.meta.get("proposer", self.proposer.name) if best is not None else "baseline",
            proposal=obtained.proposal.meta, **obtained.proposal.research_fields(), fix_attempts=trained.attempts,
            llm=LlmUsage.summed(obtained.proposal.usage, *trained.fix_usage),
            program=ProgramRef(name=experiment.program.name, sha256=experiment.program.sha256),
            diff="" if best is None else self.workspace.diff(experiment.parent, trained.commit),
            log=str(result.log_path.relative_to(self.workspace.dir)), log_tail=result.tail if status == CRASH else "",
            transcript=str(experiment.transcript.path.relative_to(self.workspace.dir)), started=in_flight.started,
            finished=now())
        self.ledger.append(record)
        self.ledger.finish(experiment.id)
        self.ledger.prune_checkpoints()
        return record

    def conclude(self, experiment: Experiment, record: ExperimentRecord) -> None:
        """Tells the proposer; stops the loop when the machine failed or the baseline produced nothing."""
        experiment.transcript.event(
            "decision", status=record.status.value, triage=record.triage, reason=record.reason,
            val_bpb=record.val_bpb, best_before=experiment.best.val_bpb if experiment.best else None,
            runs=[r.model_dump(exclude_unset=True) for r in record.runs],
            evidence=record.evidence.model_dump(exclude_unset=True))
        self.proposing.claims.drop(record.id)  # the ledger says it was tried now
        if experiment.best is not None:
            with self.shared.proposer_lock:
                self.proposer.observe(record.id, record.proposal, record)
        result = experiment.trained.result
        if result.verdict.triage == Triage.INFRA:
            raise LoopStopped(f"experiment {record.id} failed twice for a reason outside the experiment: "
                              f"{result.verdict.reason}. Fix the machine or the data (see {record.log}), then run "
                              "again: the loop resumes from the best commit")
        if experiment.best is None and record.status != KEEP:
            raise LoopStopped(f"the baseline did not produce a result ({record.triage}: {record.reason}); see "
                              f"{record.log}")
