"""Live progress of a loop: what each experiment in flight is doing, shown while it happens.

ObservedProposer and ObservedRunner wrap the loop's proposer and runner and tell a ProgressObserver
when a proposal starts (and each tool call it makes), when a run starts (its kind, seed and log) and
ends (and what ran it), and when an evaluation starts; the loop itself does not change. Several
experiments may be proposed and trained at once, from several threads: the observer keeps one phase
per experiment, writes them all to progress.json (for `status --watch` elsewhere) and shows one line
each: redrawn in place on a terminal (a line per experiment, gone once its decision is said), as
plain lines prefixed by the experiment id (on each phase, and at every quarter of a run's budget)
when the output is a log.
"""

from __future__ import annotations

import threading
import time
from contextlib import suppress
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live

from agent.recording.ledger import read_in_flight
from agent.recording.transcript import Transcript
from agent.running.run_progress import Phase, describe, last_step_line, write_phases
from agent.untrusted import shown
from trainer.runs.jobs import EvaluationJob, Job
from trainer.runs.run_id import RunId, RunKind

PLAIN_STEP_MARKS = (25, 50, 75)  # percent of the budget at which a plain line is printed
LINE_CHARS = 400
DECIDING = "deciding"


def run_phase(run: RunId, seed: int) -> tuple[str, str]:
    chain = run.chain()
    kinds = {step.kind for step in chain}
    if RunKind.CANARY in kinds:
        return "checking the machine", "the best commit, after two failures outside the experiment"
    if chain[0].kind == RunKind.NOISE:
        phase, parts = "noise floor", [f"run {chain[0].n} with seed {seed}"]
    else:
        phase, parts = "training", []
        for step in chain:
            if step.kind == RunKind.REBASE:
                parts.append(f"on the new best (re-base {step.n})")
            elif step.kind == RunKind.FIX:
                parts.append(f"fix {step.n}")
            elif step.kind == RunKind.RERUN:
                phase = "re-running"
        parts.append(f"with seed {seed}" if phase == "re-running" else f"seed {seed}")
    if RunKind.RETRY in kinds:
        parts.append("again after a machine failure")
    return phase, ", ".join(parts)


class ProgressObserver:
    def __init__(self, workspace_dir: Path, console: Console, interval: float = 1.0):
        self.workspace_dir, self.console, self.interval = workspace_dir, console, interval
        self.phases: dict[str, Phase] = {}  # line key -> the phase shown on that line
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live: Live | None = None
        self._apart: set[str] = set()  # lines of runs that are not their experiment's (a noise floor's)
        self._printed: dict[str, tuple[str, int]] = {}  # plain mode: per line, the last (phase, quarter) printed

    def __enter__(self) -> ProgressObserver:
        if self.console.is_terminal:
            self._live = Live(console=self.console, auto_refresh=False, transient=True)
            self._live.start()
        self._thread = threading.Thread(target=self._refresh, name="progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._live is not None:
            self._live.stop()
        with self._lock:
            self.phases.clear()
            write_phases(self.workspace_dir, [])

    def proposing(self, experiment_id: str, proposer: str) -> None:
        self._set(experiment_id, Phase(experiment_id=experiment_id, phase="proposing", detail=f"with {proposer}",
                                       since=time.time()))

    def tool_calls(self, experiment_id: str, proposer: str, count: int, last: str = "") -> None:
        with self._lock:
            if (phase := self.phases.get(experiment_id)) is None or phase.phase != "proposing":
                return
            phase.detail = f"with {proposer}, {count} tool call{'s' if count != 1 else ''}" + (
                f", the last {last}" if last else "")
            self._changed(experiment_id, quiet=True)

    def proposed(self, experiment_id: str) -> None:
        with self._lock:
            if (phase := self.phases.get(experiment_id)) is not None and phase.phase == "proposing":
                del self.phases[experiment_id]
                self._changed(experiment_id, quiet=True)

    def running(self, run: RunId, seed: int, log: Path) -> None:
        phase, detail = run_phase(run, seed)
        if run.line != run.experiment:
            self._apart.add(run.line)
        self._set(run.line, Phase(experiment_id=run.experiment, phase=phase, detail=detail, since=time.time(),
                                  log=str(log.relative_to(self.workspace_dir))))

    def ran(self, run: RunId, where: str = "") -> None:
        """A run or an evaluation ended (where: what ran it, if the runner said): its experiment is decided now."""
        with self._lock:
            if (phase := self.phases.get(run.line)) is not None:
                self.phases[run.line] = Phase(experiment_id=phase.experiment_id, phase=DECIDING, since=time.time(),
                                              where=where or None)
                self._changed(run.line, quiet=not where)  # a log learns what ran each run

    def evaluating(self, run: RunId, splits: tuple[str, ...]) -> None:
        phase = "confirming on the holdout" if "holdout" in splits else "verifying"
        self._set(run.line, Phase(experiment_id=run.experiment, phase=phase, detail="with the trusted evaluator",
                                  since=time.time()))

    def current(self) -> list[tuple[Phase, str]]:
        with self._lock:
            phases = [self.phases[key].model_copy() for key in sorted(self.phases)]
        return [(phase, self._describe(phase)) for phase in phases]

    def _describe(self, phase: Phase) -> str:
        return describe(phase, last_step_line(self.workspace_dir / phase.log) if phase.log else None)

    def _set(self, key: str, phase: Phase) -> None:
        with self._lock:
            self.phases[key] = phase
            self._changed(key)

    def _changed(self, key: str, quiet: bool = False) -> None:
        """Called with the lock held: progress.json rewritten, the live lines redrawn or one plain line printed."""
        if self._stop.is_set():  # a run that ends after the loop stopped changes nothing shown
            return
        with suppress(OSError):  # a full disk: progress.json is a view, the loop says what stopped it
            write_phases(self.workspace_dir, [self.phases[k] for k in sorted(self.phases)])
        if self._live is not None:
            self._redraw()
        elif not quiet and key in self.phases:
            phase = self.phases[key]
            self._print_plain(key, phase, self._describe(phase))

    def _redraw(self) -> None:
        self._live.update(Group(*(shown(line, LINE_CHARS) for _, line in self.current())), refresh=True)

    def _print_plain(self, key: str, phase: Phase, line: str, quarter: int = 0) -> None:
        if (printed := (f"{phase.phase} {phase.detail}", quarter)) != self._printed.get(key):
            self._printed[key] = printed
            self.console.print(shown(line, LINE_CHARS))

    def _forget_decided(self) -> None:
        """Drops the lines of experiments decided since (their in-flight marker is gone; the loop said the
        decision line) and of noise-floor runs and confirmations that ended (they have no marker)."""
        with self._lock:
            if not any(phase.phase == DECIDING for phase in self.phases.values()):
                return
            in_flight = {marker.id for marker in read_in_flight(self.workspace_dir)}
            decided = [key for key, phase in self.phases.items()
                       if phase.phase == DECIDING and (phase.experiment_id not in in_flight or key in self._apart)]
            for key in decided:
                del self.phases[key]
                self._printed.pop(key, None)
            if decided:
                self._changed(decided[0], quiet=True)

    def _refresh(self) -> None:
        while not self._stop.wait(self.interval):
            self._forget_decided()
            with self._lock:
                if self._live is not None:
                    self._redraw()
                    continue
                for key, phase in [(key, phase) for key, phase in self.phases.items() if phase.log]:
                    step = last_step_line(self.workspace_dir / phase.log)
                    if quarter := sum(1 for mark in PLAIN_STEP_MARKS if step is not None and step.percent >= mark):
                        self._print_plain(key, phase, describe(phase, step), quarter)


class ObservedRunner:
    def __init__(self, runner, observer: ProgressObserver):
        self._runner, self._observer = runner, observer

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def run(self, workspace, job: Job):
        self._observer.running(job.run, job.seed, workspace.paths(job.run).log)
        result = None
        try:
            result = self._runner.run(workspace, job)
            return result
        finally:
            self._observer.ran(job.run, "" if result is None else result.where)

    def evaluate(self, workspace, job: EvaluationJob):
        self._observer.evaluating(job.run, job.splits)
        try:
            return self._runner.evaluate(workspace, job)
        finally:
            self._observer.ran(job.run)


class _CountingTranscript(Transcript):
    def __init__(self, inner: Transcript, on_tool_call):
        super().__init__(inner.path)
        self._on_tool_call, self._calls = on_tool_call, 0

    def event(self, type_: str, **fields) -> None:
        super().event(type_, **fields)
        if type_ == "tool_call":
            self._calls += 1
            self._on_tool_call(self._calls, str(fields.get("name", ""))[:40])


class ObservedProposer:
    def __init__(self, proposer, observer: ProgressObserver, label: str):
        self._proposer, self._observer, self.label = proposer, observer, label

    def __getattr__(self, name):
        return getattr(self._proposer, name)

    def propose(self, context, transcript: Transcript):
        experiment_id = context.experiment_id
        self._observer.proposing(experiment_id, self.label)
        counting = _CountingTranscript(
            transcript, lambda count, last: self._observer.tool_calls(experiment_id, self.label, count, last))
        try:
            return self._proposer.propose(context, counting)
        finally:
            self._observer.proposed(experiment_id)
