"""The experiment loop: K experiments in flight, each propose -> commit -> train -> judge -> record.

One call of run_loop holds the workspace lock, first settles every experiment a dead loop left in
flight, runs the unmodified baseline alone if the ledger is empty, then keeps experiments in flight
until a limit is reached. K is --parallel, else the runner's slots (one per GPU for the local
runner).

The main thread schedules; every experiment runs its steps in a thread of its own
(agent/steps/experiment.py). Up to N proposals are made at once, each in a conversation of its own
(--proposers, else as many as keep the slots fed at the measured proposal and run times: see
agent/steps/conversations.py). A new experiment starts whenever fewer than K are proposing,
waiting or training; with `overlap`, up to N more may be proposed ahead while K train, and a free
slot takes the oldest proposal made ahead. Experiments being judged
(close-call re-runs, implausible-fall re-runs, verification of a would-be keep, a re-run on a newer
best) do not hold a place when K > 1: their runs queue at the runner as work of their own, so a
slot is not left idle while one experiment verifies. With one slot they do, so that the next
experiment is not trained against a best about to change. Noise floors are work of their own too:
their seeds run at once through the runner's slots; a result waits only for the first floor. So are
control runs of the best (agent/judging/drift.py), pooled into its runs as they are recorded.

The branch head is the best at all times and the tree stays clean: experiments are committed on
the best without moving the branch, and only a keep moves it, in the same step, under the lock,
as the check that the experiment's parent is still the best. An experiment whose parent stopped
being the best and that would be kept is re-applied on the new best and trained again. Would-be
keeps settle one at a time, in the order they ended, until the loop stops starting experiments.

A plateau (--plateau experiments in a row without a keep, agent/judging/plateau.py) is decided with the record
that ends it; the loop then says so and, as --on-plateau says, the next experiments follow the next program of
the rotation (--program given more than once), or it stops starting experiments, or it goes on.

Limits (experiments, hours, cost) stop starting experiments; those in flight finish, as they do
when the proposer fails too often or for good before the loop stops. Ctrl-C,
SIGTERM or a failure stops every run in flight and records each experiment in flight once as
interrupted; kill -9 leaves their in-flight markers, settled when the tag is resumed.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from itertools import count

from agent.importing.imported import cannot_continue
from agent.judging.drift import control_due
from agent.judging.noise import wants_noise_floor
from agent.judging.plateau import describe, stop_reason
from agent.llm.types import ProviderFatal, ProviderUnavailable, Usage
from agent.proposers.base import Proposer, ProposerError, Running
from agent.proposers.edits import EditRejected
from agent.proposers.night_facts import NightFacts
from agent.proposers.proposing import read_program
from agent.recording.gpu_cost import gpu_cost_usd
from agent.recording.ledger import Ledger
from agent.recording.proposal_failures import FailedProposal, failures_cost, record_failure
from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.recording.recovery import record_interrupted, settle_interrupted
from agent.recording.transcript import Transcript
from agent.running.disk import disk_full, short_of_room
from agent.running.runner import Runner
from agent.settings import LoopSettings, OnPlateau
from agent.steps.control import run_control
from agent.steps.conversations import Pace
from agent.steps.experiment import Steps
from agent.steps.in_flight import JUDGING, PROPOSING, READY, Experiment
from agent.steps.sharing import Shared, Stopping
from agent.steps.training import LoopStopped
from agent.workspace import Workspace
from trainer.prepare import SEAL_FD_VAR

__all__ = ["LoopSettings", "LoopStopped", "run_cost", "run_loop"]

MAX_CONSECUTIVE_PROPOSER_FAILURES = 5
STOP_WAIT_SECONDS = 10.0  # how long a stopping loop waits for its cancelled runs to end


def run_loop(workspace: Workspace, proposer: Proposer, runner: Runner, settings: LoopSettings,
             say=print) -> str:
    """Runs experiments until a limit; returns why it stopped."""
    return Loop(workspace, proposer, runner, settings, say).run()


class Loop:
    def __init__(self, workspace: Workspace, proposer: Proposer, runner: Runner, settings: LoopSettings, say):
        self.workspace, self.proposer, self.runner, self.settings, self.say = workspace, proposer, runner, settings, say
        self.ledger = Ledger(workspace.dir)
        self.shared = Shared(self.ledger, settings.seed, settings.counted_seeds)
        self.slots = settings.parallel or runner.slots
        self.floor_ready = threading.Event()
        self.steps = Steps(workspace, proposer, runner, settings, self.shared, self._moved, self._others,
                           self.floor_ready)
        self.changed = threading.Condition()   # guards `active` and wakes the scheduler
        self.active: dict[str, tuple[Experiment, Future]] = {}
        self.pace = Pace(self.ledger.records)
        self.floor: Future | None = None
        self.control: Future | None = None
        self.done, self.failures, self.paused_until = 0, 0, 0.0
        self.halted: LoopStopped | None = None  # raised once the experiments in flight are recorded
        self.plateau_stop: str | None = None    # why a plateau stopped the loop starting experiments

    def run(self) -> str:
        for message in self.ledger.set_aside:
            self.say(message)
        if self.steps.plateaus.problem:
            raise LoopStopped(self.steps.plateaus.problem)
        if SEAL_FD_VAR not in self.workspace.file_at("prepare.py", self.workspace.root_commit()):
            raise LoopStopped(f"workspace {self.workspace.dir} was created by a version whose frozen prepare.py "
                              "predates the validation seal, so its runs could not read val; start a new --tag (the "
                              "old one's results stay readable by `report` and `status`)")
        if imported_problem := cannot_continue(self.workspace):
            raise LoopStopped(imported_problem)
        with self.workspace.lock():
            self.say(self.runner.isolation)
            settle_interrupted(self.workspace, self.ledger, self.say)
            if plans := self.steps.plateaus.start(self.ledger.records):
                self.say(plans)
            if self.settings.noise_seeds <= 0 or any(r.status == ExperimentStatus.NOISE for r in self.ledger.records):
                self.floor_ready.set()
            try:
                return self._schedule()
            except BaseException as err:  # Ctrl-C, SIGTERM, a failure: nothing in flight goes on
                self._stop_all(f"the loop stopped: {type(err).__name__}")
                if full := disk_full(err):
                    raise LoopStopped(full) from err
                raise

    def _schedule(self) -> str:
        started = time.monotonic()
        while True:
            self._collect()
            why = str(self.halted) if self.halted is not None else self._limit_reached(started)
            if why is not None:
                self.shared.lane.open()  # the last experiments settle at once rather than in a line
            if why is not None and (self.halted is not None or self._out_of_time_or_money(started)):
                self._abandon_waiting(why)  # proposals made within the experiment limit still run; these do not
            if why is not None and not self.active and self.floor is None and self.control is None:
                if self.halted is not None:
                    raise self.halted
                return why
            if may_start := why is None and time.monotonic() >= self.paused_until:
                self._start_floor()
                self._start_control()
            if self._fill(started, may_start):
                continue
            with self.changed:
                self.changed.wait(timeout=0.2)

    def _fill(self, started: float, may_start: bool) -> bool:
        """Admits one proposed experiment, or starts one if may_start, if there is room; True if it did."""
        with self.changed:
            active = [experiment for experiment, _ in self.active.values()]
            if self.ledger.best() is None:  # the baseline runs alone: everything else needs a best
                return may_start and not active and self._start(started, admitted=True)
            conversations = self._conversations(active)
            holding = sum(1 for e in active if e.admitted.is_set() and (e.phase != JUDGING or self.slots == 1))
            ahead = sorted((e for e in active if not e.admitted.is_set()), key=lambda e: (e.phase != READY, e.id))
            # an admitted experiment still READY is being committed, and proposes again if its edits no longer apply
            proposing = sum(1 for e in active if e.phase == PROPOSING or e.phase == READY and e.admitted.is_set())
            if holding < self.slots:
                if ahead:  # the oldest proposal made ahead, one that is ready first
                    ahead[0].admit()
                    return True
                return may_start and proposing < conversations and self._start(started, admitted=True)
            if may_start and self.settings.overlap and len(ahead) < conversations and proposing < conversations:
                return self._start(started, admitted=False)
            return False

    def _conversations(self, active: list[Experiment]) -> int:
        """How many proposals may be made at once now: --proposers, else what keeps the slots fed."""
        for experiment in active:
            if experiment.proposal is not None and experiment.record.timings.propose_s is not None:
                self.pace.proposed(experiment.id, experiment.record.timings.propose_s)
        wanted = min(self.settings.proposers or self.pace.needed(self.slots), self.slots)
        self.shared.conversations.limit = wanted
        return wanted

    def _room(self) -> bool:
        """Whether there is room on disk for one more run; if not, the loop stops once those in flight end."""
        if short := short_of_room([self.workspace.dir, self.workspace.runs_dir]):
            self.halted = self.halted or LoopStopped(short)
        return short is None

    def _start(self, started: float, admitted: bool) -> bool:
        if not self._room():
            return False
        experiment_id = self._next_id()
        facts = NightFacts.of(self.settings, self.done + len(self.active), (time.monotonic() - started) / 3600,
                              run_cost(self.ledger, self.settings.gpu_usd_per_hour))
        transcript = Transcript(self.workspace.dir / "transcripts" / f"{experiment_id}.jsonl")
        experiment = Experiment(experiment_id, transcript, read_program(self.workspace), time.monotonic(), facts)
        if admitted:
            experiment.admit()
        # started under self.changed, which its thread takes before it reads self.active
        self.active[experiment_id] = (experiment, self._beside(f"experiment-{experiment_id}",
                                                               lambda: self.steps.run(experiment)))
        return True

    def _next_id(self) -> str:
        """The lowest id no record and no experiment in flight has (a failed proposal's id is proposed again)."""
        taken = {r.id for r in self.ledger.records} | set(self.active)
        return next(f"{number:04d}" for number in count() if f"{number:04d}" not in taken)

    def _start_floor(self) -> None:
        best = self.ledger.head()
        if self.floor is not None or best is None or not wants_noise_floor(
                self.ledger.records, self.settings.noise_seeds, self.settings.noise_every_keeps) or not self._room():
            return
        seeds = self.steps.training.noise_seeds()
        self.floor = self._beside(f"{best.id}-noise", lambda: self.steps.training.measure_noise_floor(
            best, seeds, self.say), then=self.floor_ready.set)

    def _start_control(self) -> None:
        """Re-runs the best when a control run is due, beside the experiments, never beside a noise floor."""
        if self.control is not None or self.floor is not None or (
                best := control_due(self.ledger.records, self.settings)) is None or not self._room():
            return
        seed = self.shared.seed()
        self.control = self._beside(f"{best.id}-control", lambda: run_control(self.steps.training, best, seed,
                                                                              self.say))

    def _beside(self, name: str, work, then=None) -> Future:
        """work() in a thread of its own; its future, collected by the scheduler."""
        future: Future = Future()

        def measure() -> None:
            try:
                future.set_result(work())
            except BaseException as err:  # handed to the scheduler
                future.set_exception(err)
            finally:
                if then is not None:
                    then()
                self._moved(None)

        threading.Thread(target=measure, name=name, daemon=True).start()
        return future

    def _moved(self, _experiment: Experiment | None) -> None:
        with self.changed:
            self.changed.notify_all()

    def _others(self, experiment: Experiment) -> list[Running]:
        with self.changed:
            return [e.running() for e, _ in self.active.values() if e is not experiment]

    def _collect(self) -> None:
        with self.changed:
            finished = sorted((pair for pair in self.active.values() if pair[1].done()), key=lambda p: p[0].id)
            for experiment, _ in finished:
                del self.active[experiment.id]
        for experiment, future in finished:
            self._finished(experiment, future.exception(), None if future.exception() else future.result())
        done = [future for future in (self.floor, self.control) if future is not None and future.done()]
        self.floor = None if self.floor in done else self.floor
        self.control = None if self.control in done else self.control
        for future in done:
            if (error := future.exception()) is not None and not isinstance(error, Stopping):
                raise error

    def _finished(self, experiment: Experiment, error: BaseException | None, record: ExperimentRecord | None):
        if error is None:
            if record is not None:
                self.done, self.failures = self.done + 1, 0
                if experiment.holds_slot_from is not None:
                    self.pace.ran(time.monotonic() - experiment.holds_slot_from)
                bpb = f"{record.val_bpb:.6f}" if record.val_bpb is not None else "    -   "
                self.say(f"{record.id} {record.status.value:<8} {bpb}  {record.description}"
                         + (f"  (${record.llm.cost_usd:.4f})" if record.llm.cost_usd else ""))
                if record.plateau is not None:
                    self.say(f"plateau: {describe(record)}")
                    if record.plateau.action == OnPlateau.STOP.value:
                        self.plateau_stop = self.plateau_stop or stop_reason(record)
        elif isinstance(error, (ProposerError, EditRejected)):
            self.failures += 1
            record_failure(self.workspace.dir, FailedProposal(experiment_id=experiment.id, kind="failed",
                                                              reason=str(error), in_a_row=self.failures,
                                                              usage=error.usage or Usage()))
            self.say(f"proposal failed ({self.failures} in a row): {error}")
            if self.failures >= MAX_CONSECUTIVE_PROPOSER_FAILURES:
                self.halted = LoopStopped(f"the proposer failed {self.failures} times in a row; last error: {error}")
        elif isinstance(error, (ProviderUnavailable, ProviderFatal)):
            usage = error.usage or Usage()
            if usage.calls:  # the proposal an outage or a night-ending error cut short had paid for its calls
                record_failure(self.workspace.dir, FailedProposal(experiment_id=experiment.id, kind="failed",
                                                                  reason=str(error), usage=usage))
            if isinstance(error, ProviderFatal):
                self.halted = LoopStopped(str(error))
            else:
                self.say(f"paused: {error}; " + (f"its proposal had spent ${usage.cost_usd:.4f}, " if usage.cost_usd
                         else "nothing was charged, ") + f"trying again in {self.settings.outage_poll_seconds:.0f} s")
                self.paused_until = time.monotonic() + self.settings.outage_poll_seconds
        elif not isinstance(error, Stopping):
            raise error

    def _limit_reached(self, started: float) -> str | None:
        """Why no experiment may start now, or None."""
        if self.plateau_stop is not None:
            return self.plateau_stop
        if self.settings.max_experiments is not None and self.done + len(self.active) >= self.settings.max_experiments:
            return f"ran {self.done} experiment(s), the limit for this run"
        return self._out_of_time_or_money(started)

    def _out_of_time_or_money(self, started: float) -> str | None:
        settings = self.settings
        if settings.max_hours is not None and time.monotonic() - started >= settings.max_hours * 3600:
            return f"reached the {settings.max_hours} h limit"
        if settings.max_cost_usd is not None and self._spent() >= settings.max_cost_usd:
            counted = (f", LLM spend and GPU time at ${settings.gpu_usd_per_hour:g} per GPU-hour"
                       if settings.gpu_usd_per_hour else "")
            return f"reached the cost cap of ${settings.max_cost_usd:.2f} (spent ${self._spent():.2f}{counted})"
        return None

    def _spent(self) -> float:
        """The run's spend (run_cost), with the LLM spend of the experiments in flight: their proposals (those being
        made too) and fixes; and the GPU time of their runs so far, where a GPU price was given."""
        with self.changed:
            in_flight = [e for e, _ in self.active.values() if e.abandoned is None and not self.ledger.has(e.id)]
            pending = sum(e.spend.cost_usd for e in in_flight)
            pending += gpu_cost_usd([e.record for e in in_flight], self.settings.gpu_usd_per_hour)
        return run_cost(self.ledger, self.settings.gpu_usd_per_hour) + pending

    def _abandon_waiting(self, why: str) -> None:
        """Experiments proposed but not yet admitted will not train: a limit was reached."""
        with self.changed:
            for experiment, _ in self.active.values():
                if not experiment.admitted.is_set():
                    experiment.admit(why_not=why)

    def _stop_all(self, why: str) -> None:
        """Every run in flight stopped, every experiment in flight recorded once as interrupted, proposals
        made but not trained recorded with their spend; the branch stays at the best."""
        self.shared.stopping.set()
        with self.changed:
            in_flight = [(e, future) for e, future in self.active.values() if e.committed]
        self.runner.cancel_all()
        futures_wait([future for _, future in in_flight], timeout=STOP_WAIT_SECONDS)  # runs wind down
        with self.shared.lock, self.changed:
            for experiment, _ in sorted(self.active.values(), key=lambda pair: pair[0].id):
                try:
                    if experiment.committed and not self.ledger.has(experiment.id):
                        record_interrupted(self.workspace, self.ledger, experiment.record, self.ledger.head(),
                                           experiment.transcript)
                    elif not experiment.committed and experiment.proposal is not None and experiment.abandoned is None:
                        made = experiment.proposal if experiment.best is not None else None
                        self.steps.proposing.abandon(experiment.id, made, experiment.transcript, why)
                except OSError as err:  # a full disk: its in-flight marker stays, settled when the tag resumes
                    self.say(f"{experiment.id} could not be recorded now ({err}); it will be when the tag resumes")


def run_cost(ledger: Ledger, gpu_usd_per_hour: float | None = None) -> float:
    """Spend of the run: the LLM spend of its experiments and of proposals that produced none, plus its runs' GPU
    time at gpu_usd_per_hour where that is given."""
    records = ledger.records
    return (sum(r.llm.cost_usd for r in records) + failures_cost(ledger.jsonl.parent)
            + gpu_cost_usd(records, gpu_usd_per_hour))
