"""The experiment loop: propose -> commit -> train -> judge -> record, then keep or reset.

One call of run_loop holds the workspace lock, first settles an experiment that a dead loop
left in flight, runs the unmodified baseline if the ledger is empty, then runs experiments
until a limit is reached. Every experiment ends with the branch head at the best commit,
a clean tree, one ledger row and a transcript.
"""

from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field

from agent.judging.decisions import decide, implausible_fall, verified
from agent.judging.noise import CLOSE, CRASH, DISCARD, KEEP, Judgement, fresh_seed, wants_noise_floor
from agent.judging.simplify import simplify_or_discard
from agent.llm.types import ProviderFatal, ProviderUnavailable
from agent.proposers.base import Proposer, ProposerError, Running
from agent.proposers.edits import EditRejected
from agent.proposers.night_facts import NightFacts
from agent.proposers.proposing import Ahead, Obtained, Program, Proposing, read_program
from agent.recording.ledger import Ledger
from agent.recording.notes import record_with_keep
from agent.recording.proposal_failures import FailedProposal, failures_cost, record_failure
from agent.recording.record import (
    Evidence,
    ExperimentRecord,
    InFlight,
    LlmUsage,
    ProgramRef,
    RunEntry,
    Timings,
    now,
    summary_number,
)
from agent.recording.recovery import record_interrupted, settle_interrupted
from agent.recording.transcript import Transcript
from agent.running.fixing import Fixing, Trained
from agent.running.runner import Runner
from agent.running.training import LoopStopped, Training
from agent.settings import LoopSettings
from agent.untrusted import bounded
from agent.workspace import Workspace
from trainer.prepare import SEAL_FD_VAR
from trainer.triage import Triage

__all__ = ["LoopSettings", "LoopStopped", "run_cost", "run_loop"]

MAX_CONSECUTIVE_PROPOSER_FAILURES = 5


@dataclass
class Experiment:
    """One experiment as it moves through the steps; each step fills in its part."""
    id: str
    transcript: Transcript
    best: ExperimentRecord | None   # None: this is the baseline
    parent: str
    program: Program
    clock: float                    # time.monotonic() at its start
    facts: NightFacts               # the budget left and the keep rule, as the proposer is told
    obtained: Obtained | None = None
    in_flight: InFlight | None = None
    next_ahead: Ahead | None = None  # the next experiment's proposal, made while this one trains
    trained: Trained | None = None
    runs: list[RunEntry] = field(default_factory=list)
    judgement: Judgement | None = None


def run_loop(workspace: Workspace, proposer: Proposer, runner: Runner, settings: LoopSettings,
             say=print) -> str:
    """Runs experiments until a limit; returns why it stopped."""
    return Loop(workspace, proposer, runner, settings, say).run()


class Loop:
    def __init__(self, workspace: Workspace, proposer: Proposer, runner: Runner, settings: LoopSettings, say):
        self.workspace, self.proposer, self.runner, self.settings, self.say = workspace, proposer, runner, settings, say
        self.ledger = Ledger(workspace.dir)
        self.proposing = Proposing(workspace, self.ledger, proposer)
        self.training = Training(workspace, runner, settings)
        self.fixing = Fixing(self.training, self.ledger, proposer)

    def run(self) -> str:
        for message in self.ledger.set_aside:
            self.say(message)
        if SEAL_FD_VAR not in self.workspace.file_at("prepare.py", self.workspace.root_commit()):
            raise LoopStopped(f"workspace {self.workspace.dir} was created by a version whose frozen prepare.py "
                              "predates the validation seal, so its runs could not read val; start a new --tag (the "
                              "old one's results stay readable by `report` and `status`)")
        with self.workspace.lock():
            self.say(self.runner.isolation)
            settle_interrupted(self.workspace, self.ledger, self.say)
            return self._experiments()

    def _experiments(self) -> str:
        started, done, failures = time.monotonic(), 0, 0
        ahead: Ahead | None = None
        while True:
            why = self._limit_reached(started, done)
            if why is not None:
                self.proposing.abandon(ahead, why)  # a proposal made ahead is paid for even if never run
                return why
            if wants_noise_floor(self.ledger.records, self.settings.noise_seeds, self.settings.noise_every_keeps):
                self.training.measure_noise_floor(self.ledger, self.say)
            last = self.settings.max_experiments is not None and done + 1 >= self.settings.max_experiments
            try:
                record, ahead = self.run_experiment(ahead, look_ahead=self.settings.overlap and not last,
                                                    facts=self._facts(started, done))
            except (ProposerError, EditRejected) as err:
                ahead, failures = None, failures + 1
                self._proposal_failed(err, failures)
                continue
            except ProviderUnavailable as err:
                ahead = None
                self.say(f"paused: {err}; nothing was charged, trying again in "
                         f"{self.settings.outage_poll_seconds:.0f} s")
                time.sleep(self.settings.outage_poll_seconds)
                continue
            except ProviderFatal as err:
                raise LoopStopped(str(err)) from err
            failures, done = 0, done + 1
            self.say(f"{record.id} {record.status.value:<8} {_bpb(record)}  {record.description}"
                     + (f"  (${record.llm.cost_usd:.4f})" if record.llm.cost_usd else ""))

    def _limit_reached(self, started: float, done: int) -> str | None:
        settings = self.settings
        if settings.max_experiments is not None and done >= settings.max_experiments:
            return f"ran {done} experiment(s), the limit for this run"
        if settings.max_hours is not None and time.monotonic() - started >= settings.max_hours * 3600:
            return f"reached the {settings.max_hours} h limit"
        if settings.max_cost_usd is not None and run_cost(self.ledger) >= settings.max_cost_usd:
            return f"reached the cost cap of ${settings.max_cost_usd:.2f} (spent ${run_cost(self.ledger):.2f})"
        return None

    def _facts(self, started: float, done: int) -> NightFacts:
        return NightFacts.of(self.settings, done, (time.monotonic() - started) / 3600, run_cost(self.ledger))

    def _proposal_failed(self, err: Exception, in_a_row: int) -> None:
        record_failure(self.workspace.dir, FailedProposal(
            experiment_id=self.ledger.next_id(), kind="failed", reason=str(err), in_a_row=in_a_row,
            usage=getattr(err, "usage", {})))
        self.say(f"proposal failed ({in_a_row} in a row): {err}")
        if in_a_row >= MAX_CONSECUTIVE_PROPOSER_FAILURES:
            raise LoopStopped(f"the proposer failed {in_a_row} times in a row; last error: {err}") from err

    # -- one experiment -------------------------------------------------------

    def run_experiment(self, ahead: Ahead | None = None, look_ahead: bool = False,
                       facts: NightFacts | None = None) -> tuple[ExperimentRecord, Ahead | None]:
        """One experiment, and the proposal for the next one if look_ahead (made while this one trains)."""
        experiment_id = self.ledger.next_id()
        transcript = Transcript(self.workspace.dir / "transcripts" / f"{experiment_id}.jsonl")
        experiment = Experiment(experiment_id, transcript, self.ledger.best(), self.workspace.head(),
                                read_program(self.workspace), time.monotonic(),
                                facts or NightFacts.of(self.settings))
        self.propose(experiment, ahead)
        self.look_ahead(experiment, look_ahead)
        try:
            experiment.trained = self.fixing.train(experiment.in_flight, experiment.obtained.source,
                                                   experiment.transcript, can_fix=experiment.best is not None)
        except KeyboardInterrupt:
            record_interrupted(self.workspace, self.ledger, experiment.in_flight, experiment.best,
                               experiment.transcript)
            self.proposing.abandon(experiment.next_ahead, "the loop was interrupted")
            raise
        self.judge(experiment)
        record = self.record(experiment)
        self.conclude(experiment, record)
        return record, experiment.next_ahead

    def propose(self, experiment: Experiment, ahead: Ahead | None) -> None:
        """The proposal, committed (the baseline runs its parent), and the in-flight marker written."""
        best, parent = experiment.best, experiment.parent
        experiment.obtained = self.proposing.obtain(experiment.id, best, experiment.program, experiment.transcript,
                                                    ahead, experiment.facts)
        description = bounded(experiment.obtained.proposal.description)
        commit = parent if best is None else self.workspace.commit_train(experiment.obtained.source,
                                                                         f"{experiment.id}: {description}")
        experiment.transcript.event("committed", commit=commit, parent=parent,
                                    diff="" if best is None else self.workspace.diff(parent, commit))
        # The baseline runs with the base seed; every later run with a seed no run of this tag used, so that
        # no experiment is compared on a seed that is systematically luckier or unluckier than the mean.
        seed = self.settings.seed if best is None else fresh_seed(self.ledger.records, self.settings.seed)
        experiment.in_flight = InFlight(id=experiment.id, commit=commit, parent=parent, description=description,
                                        started=now(), pid=os.getpid(), proposal=experiment.obtained.proposal.meta,
                                        program=experiment.program.name, seed=seed)
        self.ledger.begin(experiment.in_flight)

    def look_ahead(self, experiment: Experiment, wanted: bool) -> None:
        """Starts proposing the next experiment while this one trains, unless the budget pays for no more."""
        spent = run_cost(self.ledger) + experiment.obtained.proposal.usage.get("cost_usd", 0.0)
        if self.settings.max_cost_usd is not None and spent >= self.settings.max_cost_usd:
            return
        if wanted and experiment.best is not None:
            in_flight = experiment.in_flight
            running = Running(in_flight.id, in_flight.description, in_flight.proposal.get("proposer"))
            experiment.next_ahead = self.proposing.look_ahead(experiment.best, experiment.parent, running,
                                                              experiment.facts.after_one())

    def judge(self, experiment: Experiment) -> None:
        """The verdict on the runs: re-runs for close calls and implausible falls, verification of a keep."""
        result = experiment.trained.result
        experiment.runs = [RunEntry.of(result, experiment.in_flight.seed, self.workspace.dir)]
        judgement = self._decide(experiment, result)
        # A fall too large for one change is never kept on one number: trained again from scratch, flagged.
        suspicion = implausible_fall(experiment.runs, experiment.best) if judgement.status == KEEP else None
        if suspicion:
            judgement = self._train_again(experiment, suspicion)
        while judgement.status == CLOSE:
            judgement = self._train_again(experiment, judgement.reason)
        if experiment.best is not None:
            judgement = simplify_or_discard(judgement, self.workspace.file_at("train.py", experiment.parent),
                                            self.workspace.file_at("train.py", experiment.trained.commit),
                                            experiment.runs, experiment.best, self.ledger.records)
        if suspicion:
            judgement.evidence.implausible_fall = suspicion
            judgement.reason += f"; flagged: {suspicion}, so it was trained again from scratch"
        if judgement.status == KEEP and experiment.best is not None:
            judgement = verified(self.workspace, self.runner, experiment.trained.commit, experiment.runs, judgement,
                                 experiment.transcript)
        experiment.judgement = judgement

    def _decide(self, experiment: Experiment, result) -> Judgement:
        return decide(result, experiment.best, self.ledger.records, experiment.runs, self.settings.keep_sigmas,
                      self.settings.min_delta)

    def _train_again(self, experiment: Experiment, why: str) -> Judgement:
        seed = fresh_seed(self.ledger.records, self.settings.seed, also_used=experiment.runs)
        experiment.transcript.event("rerun", seed=seed, reason=why)
        again = self.training.run(experiment.trained.commit, f"{experiment.id}.rerun{len(experiment.runs)}", seed,
                                  experiment.transcript)
        experiment.runs.append(RunEntry.of(again, seed, self.workspace.dir))
        experiment.trained.run_seconds += again.seconds
        verdict = self._decide(experiment, again)
        if verdict.status == CRASH:
            return Judgement(DISCARD, f"the re-run crashed ({verdict.reason}): the gain did not reproduce",
                             Evidence(candidate_runs=[r.val_bpb for r in experiment.runs]))
        return verdict

    def record(self, experiment: Experiment) -> ExperimentRecord:
        """The ledger row; the branch is reset to the parent unless kept."""
        best, obtained, trained, judgement = experiment.best, experiment.obtained, experiment.trained, \
            experiment.judgement
        result, status, in_flight = trained.result, judgement.status, experiment.in_flight
        measured = [r.val_bpb for r in experiment.runs if r.val_bpb is not None]
        if status != KEEP:
            self.workspace.reset_to(experiment.parent)
        else:
            record_with_keep(self.workspace.repo, trained.commit, self.workspace.dir)
        total = time.monotonic() - experiment.clock
        record = ExperimentRecord(
            id=experiment.id, parent=experiment.parent, commit=trained.commit, status=status,
            triage=judgement.triage or result.verdict.triage.value, verified=status == KEEP and best is not None,
            reason=judgement.reason, description=in_flight.description,
            val_bpb=statistics.fmean(measured) if measured and status != CRASH else None,
            runs=experiment.runs, evidence=judgement.evidence,
            checkpoint=str(result.checkpoint.relative_to(self.workspace.dir)) if status == KEEP and result.checkpoint
            else None,
            peak_vram_mb=summary_number(result.summary.get("peak_vram_mb")), summary=result.summary,
            architecture=result.model_config,
            returncode=result.returncode, timed_out=result.timed_out, frozen_changed=result.frozen_changed,
            proposed_against=obtained.base_commit, rebased=obtained.rebased,
            timings=Timings(propose_s=round(obtained.propose_seconds, 3), wait_s=round(obtained.wait_seconds, 3),
                            run_s=round(trained.run_seconds, 3), total_s=round(total, 3),
                            agent_s=round(max(0.0, total - obtained.wait_seconds - trained.run_seconds), 3)),
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
        if experiment.next_ahead is not None:
            futures_wait([experiment.next_ahead.future])  # proposers are told and asked from one thread at a time
        if experiment.best is not None:
            self.proposer.observe(record.id, record.proposal, record)
        result = experiment.trained.result
        if result.verdict.triage == Triage.INFRA:
            self.proposing.abandon(experiment.next_ahead, "the loop stopped on an infra failure")
            raise LoopStopped(f"experiment {record.id} failed twice for a reason outside the experiment: "
                              f"{result.verdict.reason}. Fix the machine or the data (see {record.log}), then run "
                              "again: the loop resumes from the best commit")
        if experiment.best is None and record.status != KEEP:
            raise LoopStopped(f"the baseline did not produce a result ({record.triage}: {record.reason}); see "
                              f"{record.log}")


def run_cost(ledger: Ledger) -> float:
    """LLM spend of the run: its experiments' and that of proposals that produced none."""
    return sum(r.llm.cost_usd for r in ledger.records) + failures_cost(ledger.jsonl.parent)


def _bpb(record: ExperimentRecord) -> str:
    return f"{record.val_bpb:.6f}" if record.val_bpb is not None else "    -   "
