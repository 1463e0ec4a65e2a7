"""One experiment, in a thread of its own: propose -> commit -> train -> judge -> record.

It is proposed against the best of the moment, told what else is in flight. It waits for a
training place (the loop admits it), is committed on the best without moving the branch
(re-applied first if the best moved while it was proposed), trained, and judged by the keep
procedure (agent/judging/keep.py) against the parent it was trained on. If another experiment was
kept meanwhile and this one would be kept (or is a close call) against its old parent, its edits are
re-applied on the new best and it is trained and judged again (at most MAX_REBASES times, one would-be
keep at a time: agent/steps/sharing.py, LandingLane); if they no longer apply it is recorded as superseded.
The check that its parent is still the best and the keep (ledger row, branch moved) happen in one step
under the loop's lock, so a keep is never judged against an old best.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from functools import partial

from agent.judging.keep import Case, KeepProcedure
from agent.judging.keep_rule import KeepRule
from agent.judging.noise import CLOSE, CRASH, KEEP
from agent.judging.plateau import Plateaus
from agent.llm.types import Usage
from agent.proposers.base import Proposer, Running
from agent.proposers.edits import EditRejected
from agent.proposers.proposing import Proposing
from agent.recording.notes import record_with_keep
from agent.recording.novelty import novelty
from agent.recording.record import (
    ExperimentRecord,
    ExperimentStatus,
    RebasedFrom,
    RunEntry,
    now,
    summary_number,
)
from agent.running.runner import Runner, RunResult
from agent.settings import LoopSettings
from agent.steps.fixing import Fixing
from agent.steps.in_flight import JUDGING, PROPOSING, READY, TRAINING, Experiment
from agent.steps.sharing import Shared, Stopping
from agent.steps.training import LoopStopped, Training
from agent.untrusted import bounded
from agent.workspace import Workspace
from trainer.runs.run_id import RunId, RunKind
from trainer.runs.triage import Triage

MAX_REBASES = 3  # re-applications on a newer best before an experiment is recorded as superseded


class Steps:
    """The steps of one experiment; `moved(experiment)` tells the loop its phase changed, `others(experiment)`
    what else is in flight, and `floor_ready` is set once the first noise floor is measured."""

    def __init__(self, workspace: Workspace, proposer: Proposer, runner: Runner, settings: LoopSettings,
                 shared: Shared, moved: Callable[[Experiment], None],
                 others: Callable[[Experiment], list[Running]], floor_ready: threading.Event):
        self.workspace, self.proposer, self.settings, self.shared = workspace, proposer, settings, shared
        self.ledger = shared.ledger
        self.moved, self.others, self.floor_ready = moved, others, floor_ready
        self.proposing = Proposing(workspace, self.ledger, proposer, shared.proposer_lock, shared.lock)
        self.training = Training(workspace, runner, settings, shared)
        self.fixing = Fixing(self.training, proposer, shared)
        self.keeping = KeepProcedure(workspace, runner, KeepRule.of(settings), self.ledger.history)
        self.plateaus = Plateaus(workspace, settings)

    def run(self, experiment: Experiment) -> ExperimentRecord | None:
        """Its ledger record; None when it never trained (abandoned) or the loop is stopping (it records it)."""
        experiment.record.transcript = str(experiment.transcript.path.relative_to(self.workspace.dir))
        try:
            if not self.propose(experiment):
                return None
            self.commit(experiment)
            self.train(experiment)
            record = None
            while record is None:
                self._phase(experiment, JUDGING)
                self.judge(experiment)
                record = self.settle(experiment) or self.rebase(experiment)
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

    def propose(self, experiment: Experiment) -> bool:
        """The proposal against the best of the moment; then it waits to be admitted. False: abandoned."""
        self._propose_on_best(experiment)
        proposed = time.monotonic()
        self._phase(experiment, READY)
        while not experiment.admitted.wait(0.2):
            self.shared.check()
        if experiment.abandoned is not None:
            made = experiment.proposal if experiment.best is not None else None
            self.proposing.abandon(experiment.id, made, experiment.transcript, experiment.abandoned)
            return False
        experiment.record.timings.wait_s = round(max(0.0, proposed - experiment.admitted_at), 3)
        experiment.holds_slot_from = max(proposed, experiment.admitted_at)
        return True

    def _propose_on_best(self, experiment: Experiment) -> None:
        # the best and what is in flight as they are when its conversation opens
        with self.shared.conversations.held(experiment.id, self.shared.check), self.shared.proposer_turn():
            with self.shared.lock:
                best, head = self.ledger.head(), self.workspace.head()
                train_source = self.workspace.file_at("train.py", head)
            experiment.best, experiment.record.parent = best, head
            if best is None:
                experiment.proposal = self.proposing.baseline(train_source, experiment.transcript)
                experiment.record.description, experiment.record.proposer = "baseline", "baseline"
                return
            others = [r for r in self.others(experiment) if r is not None]
            draft, started = experiment.record, time.monotonic()
            draft.llm = Usage.total()  # a proposal made earlier for it was recorded with its spend
            try:
                proposal = self.proposing.propose(experiment.id, best, train_source, experiment.program,
                                                  experiment.transcript, experiment.facts, others, draft.llm)
            except BaseException:
                draft.llm = Usage.total()  # what it spent is recorded with the failure
                raise
            draft.timings.propose_s = round(time.monotonic() - started, 3)
            draft.llm = Usage.total(proposal.usage)
            draft.description, draft.proposed_against = bounded(proposal.description), best.commit
            draft.proposer, draft.proposal = proposal.meta.get("proposer", self.proposer.name), proposal.meta
            for name, value in proposal.research_fields().items():
                setattr(draft, name, value)
            experiment.proposal = proposal

    def commit(self, experiment: Experiment) -> None:
        """Committed on the best (re-applied, or proposed again, if the best moved since the proposal) and its
        in-flight marker written; the baseline runs its parent."""
        while True:
            with self.shared.lock:
                self.shared.check()
                best, head = self.ledger.head(), self.workspace.head()
                if experiment.best is None or head == experiment.record.parent or self.proposing.reapplied(
                        experiment.id, experiment.proposal, best, self.workspace.file_at("train.py", head),
                        experiment.transcript):
                    if experiment.best is not None:
                        experiment.record.rebased = head != experiment.record.parent
                        experiment.best, experiment.record.parent = best, head
                    self._begin(experiment)
                    break
            self.proposing.told_unused(experiment.id, experiment.proposal)
            self._phase(experiment, PROPOSING)
            waited = time.monotonic()
            self._propose_on_best(experiment)  # the best moved and the edits no longer apply: propose again
            experiment.record.timings.wait_s = round(time.monotonic() - waited, 3)
        self._phase(experiment, TRAINING)

    def _begin(self, experiment: Experiment) -> None:
        draft, proposal = experiment.record, experiment.proposal
        parent = draft.parent
        if experiment.best is None:
            draft.commit, draft.diff = parent, ""
        else:
            parent_source = self.workspace.file_at("train.py", parent)
            source = proposal.checked_against(parent_source)
            draft.commit = self.workspace.commit_train(source, f"{experiment.id}: {draft.description}", parent)
            draft.diff, draft.novelty = self.workspace.diff(parent, draft.commit), novelty(parent_source, source)
        experiment.transcript.event("committed", commit=draft.commit, parent=parent, diff=draft.diff)
        # The baseline runs with the base seed; every later run with a seed no run of this tag used, so that
        # no experiment is compared on a seed that is systematically luckier or unluckier than the mean.
        experiment.seed = self.settings.seed if experiment.best is None else self.shared.seed()
        draft.started = draft.started or now()
        self.shared.save_draft(draft)

    def train(self, experiment: Experiment, run: RunId | None = None) -> None:
        self.fixing.train(experiment, run or RunId.train(experiment.id), can_fix=experiment.best is not None)

    def judge(self, experiment: Experiment) -> None:
        """The verdict of the keep procedure (agent/judging/keep.py) on its runs; re-runs are trained here."""
        experiment.record.runs = [RunEntry.of(experiment.result, experiment.seed, self.workspace.dir)]
        self.shared.save_draft(experiment.record)
        if experiment.best is not None:
            while not self.floor_ready.wait(0.2):  # the first noise floor decides how results are compared
                self.shared.check()
        experiment.judgement = self.keeping.judge(Case(
            record=experiment.record, best=experiment.best, result=experiment.result,
            transcript=experiment.transcript, train_again=partial(self._train_again, experiment),
            wait_to_land=lambda judged: self.shared.lane.enter(
                experiment.id, self.shared.check,
                lambda ahead: experiment.transcript.event("waiting_to_land", behind=ahead, judged=judged)),
            best_moved=partial(self._best_moved, experiment)))

    def _best_moved(self, experiment: Experiment) -> bool:
        with self.shared.lock:
            return experiment.best is not None and self.workspace.head() != experiment.record.parent

    def _train_again(self, experiment: Experiment, why: str) -> RunResult:
        draft = experiment.record
        seed = self.shared.seed(also_used=draft.runs)
        experiment.transcript.event("rerun", seed=seed, reason=why)
        reruns = len(draft.runs) + sum(len(earlier.runs) for earlier in draft.rebased_from)  # no log written twice
        again = self.training.run(draft.commit, RunId.train(experiment.id).then(RunKind.RERUN, reruns), seed,
                                  experiment.transcript)
        draft.runs.append(RunEntry.of(again, seed, self.workspace.dir))
        draft.timings.run_s = round((draft.timings.run_s or 0.0) + again.seconds, 3)
        self.shared.save_draft(draft)
        return again

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
            best, head = self.ledger.head(), self.workspace.head()
            draft = experiment.record
            draft.rebased_from.append(RebasedFrom(parent=draft.parent, commit=draft.commit, runs=draft.runs,
                                                  status=str(experiment.judgement.status)))
            experiment.transcript.event("rebase", from_parent=experiment.record.parent, onto=head,
                                        judged=str(experiment.judgement.status), reason=experiment.judgement.reason)
            if len(experiment.record.rebased_from) > MAX_REBASES:
                return self.record(experiment, ExperimentStatus.SUPERSEDED,
                                   f"it beat its parent, but the best moved on {MAX_REBASES} times while it was "
                                   "judged; it was not trained again")
            try:
                experiment.proposal.checked_against(self.workspace.file_at("train.py", head))
            except EditRejected as err:
                experiment.transcript.event("rebase_failed", onto=head, message=str(err))
                return self.record(experiment, ExperimentStatus.SUPERSEDED,
                                   f"it beat its parent {draft.parent[:7]}, but the best moved to {head[:7]} and "
                                   f"its edits no longer apply there: {err}")
            experiment.best, draft.parent, draft.rebased = best, head, True
            self._begin(experiment)
        self.train(experiment, RunId.train(experiment.id).then(RunKind.REBASE, len(draft.rebased_from)))
        return None

    def record(self, experiment: Experiment, status: ExperimentStatus, reason: str | None = None) -> ExperimentRecord:
        """Its draft decided and appended to the ledger (under the lock); a keep moves the branch to its commit."""
        record, result, judgement = experiment.record, experiment.result, experiment.judgement
        if status == ExperimentStatus.SUPERSEDED:
            record.runs = record.rebased_from[-1].runs
        measured = [r.val_bpb for r in record.runs if r.val_bpb is not None]
        if status == KEEP:
            if experiment.best is not None:
                self.workspace.advance_to(record.commit)
            record_with_keep(self.workspace.repo, record.commit, self.workspace.dir)
        if record.rebased_from:
            record.rebased_from = record.rebased_from  # written only where it was re-based
        record.status, record.reason = status, reason or judgement.reason
        record.triage = judgement.triage or result.verdict.triage.value
        record.verified = status == KEEP and bool(record.runs) and all(
            run.trusted for run in record.runs if run.val_bpb is not None)
        record.val_bpb = statistics.fmean(measured) if measured and status != CRASH else None
        record.evidence = judgement.evidence
        record.checkpoint = (str(result.checkpoint.relative_to(self.workspace.dir))
                             if status == KEEP and result.checkpoint else None)
        # a run that died after its seal claimed nothing: its printed val_bpb stays in its check, not its summary
        record.summary = ({key: value for key, value in result.summary.items() if key != "val_bpb"}
                          if result.salvage is not None else result.summary)
        record.architecture = result.model_config
        record.peak_vram_mb = summary_number(result.summary.get("peak_vram_mb"))
        record.returncode, record.timed_out, record.frozen_changed = (result.returncode, result.timed_out,
                                                                      result.frozen_changed)
        record.log = str(result.log_path.relative_to(self.workspace.dir))
        record.log_tail = result.tail if status == CRASH else ""
        timings = record.timings
        timings.total_s = round(time.monotonic() - experiment.clock, 3)
        timings.agent_s = round(max(0.0, timings.total_s - (timings.wait_s or 0.0) - (timings.run_s or 0.0)), 3)
        record.finished = now()
        if plateau := self.plateaus.ended_by(self.ledger.records, record):  # acted on with the record it ends
            record.plateau = plateau
        self.ledger.append(record)
        self.ledger.finish(experiment.id)
        self.shared.checkpoints.release(experiment.id)
        self.ledger.prune_checkpoints(self.shared.checkpoints.in_use())
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
                self.proposer.observe(record)
        result = experiment.result
        if result.verdict.triage == Triage.INFRA:
            raise LoopStopped(f"experiment {record.id} failed twice for a reason outside the experiment: "
                              f"{result.verdict.reason}. Fix the machine or the data (see {record.log}), then run "
                              "again: the loop resumes from the best commit")
        if experiment.best is None and record.status != KEEP:
            said = record.reason if record.reason.startswith(f"{record.triage}:") else (
                f"{record.triage}: {record.reason}")
            raise LoopStopped(f"the baseline did not produce a result ({said}); see {record.log}")
