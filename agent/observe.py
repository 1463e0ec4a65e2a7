"""Live progress of a loop: what the experiment in flight is doing, shown while it happens.

ObservedProposer and ObservedRunner wrap the loop's proposer and runner and tell a ProgressObserver
when a proposal starts (and each tool call it makes), when a run starts (its kind, seed and log),
and when an evaluation starts; the loop itself does not change. The observer writes the phase to
progress.json (for `status --watch` elsewhere) and shows one line: redrawn in place on a terminal,
as plain lines (on each phase, and at every quarter of a run's budget) when the output is a log.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from agent.recording.transcript import Transcript
from agent.running.run_progress import Phase, describe, last_step_line, write_phase
from agent.untrusted import shown

PLAIN_STEP_MARKS = (25, 50, 75)  # percent of the budget at which a plain line is printed
_RUN_KIND = re.compile(r"^(?P<id>[\w-]+?)(?:-noise(?P<noise>\d+)|\.rerun(?P<rerun>\d+)|\.fix(?P<fix>\d+))?"
                       r"(?P<retry>\.retry)?$")


class ProgressObserver:
    def __init__(self, workspace_dir: Path, console: Console, interval: float = 1.0):
        self.workspace_dir, self.console, self.interval = workspace_dir, console, interval
        self.run: Phase | None = None        # the run in flight, or the experiment being decided after it
        self.proposal: Phase | None = None   # a proposal being made (for this experiment or the next)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live: Live | None = None
        self._printed: tuple[str, int] | None = None  # plain mode: the last (phase, quarter) printed

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
        write_phase(self.workspace_dir, None)

    # --- told by the wrappers -------------------------------------------------------------------------
    def proposing(self, experiment_id: str, proposer: str) -> None:
        with self._lock:
            self.proposal = Phase(experiment_id=experiment_id, phase="proposing", detail=f"with {proposer}",
                                  since=time.time())
            if self.run is not None and self.run.phase == "deciding":  # that experiment is recorded by now
                self.run = None
        self._changed()

    def tool_calls(self, experiment_id: str, proposer: str, count: int) -> None:
        with self._lock:
            if self.proposal is not None and self.proposal.experiment_id == experiment_id:
                self.proposal.detail = f"with {proposer}, {count} tool call{'s' if count != 1 else ''}"
        self._changed(quiet=True)

    def proposed(self, experiment_id: str) -> None:
        with self._lock:
            if self.proposal is not None and self.proposal.experiment_id == experiment_id:
                self.proposal = None
        self._changed(quiet=True)

    def running(self, run_name: str, seed: int, log: Path) -> None:
        kind = _RUN_KIND.match(run_name)
        experiment_id, phase, detail = run_name, "training", f"seed {seed}"
        if kind is not None:
            experiment_id = kind["id"]
            if kind["noise"]:
                phase, detail = "noise floor", f"run {kind['noise']} with seed {seed}"
            elif kind["rerun"]:
                phase, detail = "re-running", f"with seed {seed}"
            elif kind["fix"]:
                phase, detail = "training", f"fix {kind['fix']}, seed {seed}"
            if kind["retry"]:
                detail += ", again after a machine failure"
        with self._lock:
            self.run = Phase(experiment_id=experiment_id, phase=phase, detail=detail, since=time.time(),
                             log=str(log.relative_to(self.workspace_dir)))
        self._changed()

    def ran(self) -> None:
        with self._lock:
            if self.run is not None:
                self.run = Phase(experiment_id=self.run.experiment_id, phase="deciding", since=time.time())
        self._changed(quiet=True)

    def evaluating(self, name: str, splits: tuple[str, ...]) -> None:
        phase = "confirming on the holdout" if "holdout" in splits else "verifying"
        experiment_id = name.removeprefix("verify-").removeprefix("confirm-").split(".")[0]
        with self._lock:
            self.run = Phase(experiment_id=experiment_id, phase=phase, detail="with the trusted evaluator",
                             since=time.time())
        self._changed()

    # --- shown -------------------------------------------------------------------------------------------
    def current(self) -> tuple[Phase | None, str]:
        """The phase shown and its line."""
        with self._lock:
            shown_phase = self.run.model_copy() if self.run is not None else None
            proposal = self.proposal.model_copy() if self.proposal is not None else None
        if shown_phase is None:
            shown_phase = proposal
        elif proposal is not None:  # the next experiment, proposed while this one trains
            shown_phase.next_proposal = f"{proposal.experiment_id} {proposal.phase} {proposal.detail}"
        if shown_phase is None:
            return None, ""
        step = last_step_line(self.workspace_dir / shown_phase.log) if shown_phase.log else None
        return shown_phase, describe(shown_phase, step)

    def _changed(self, quiet: bool = False) -> None:
        phase, line = self.current()
        if phase is not None:
            write_phase(self.workspace_dir, phase)
        if self._live is not None:
            self._live.update(shown(line, 400), refresh=True)
        elif phase is not None and not quiet:
            self._print_plain(phase, line)

    def _print_plain(self, phase: Phase, line: str, quarter: int = 0) -> None:
        key = (f"{phase.experiment_id} {phase.phase} {phase.detail}", quarter)
        if key != self._printed:
            self._printed = key
            self.console.print(shown(line, 400))

    def _refresh(self) -> None:
        while not self._stop.wait(self.interval):
            phase, line = self.current()
            if phase is None:
                continue
            if self._live is not None:
                self._live.update(shown(line, 400), refresh=True)
            elif phase.log:
                step = last_step_line(self.workspace_dir / phase.log)
                quarter = sum(1 for mark in PLAIN_STEP_MARKS if step is not None and step.percent >= mark)
                if quarter:
                    self._print_plain(phase, line, quarter)


class ObservedRunner:
    """A runner that tells the observer when its runs and evaluations start and end."""

    def __init__(self, runner, observer: ProgressObserver):
        self._runner, self._observer = runner, observer

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def run(self, workspace, commit: str, timeout: float, experiment_id: str, seed: int = 42):
        self._observer.running(experiment_id, seed, workspace.dir / "logs" / f"{experiment_id}.log")
        try:
            return self._runner.run(workspace, commit, timeout, experiment_id, seed)
        finally:
            self._observer.ran()

    def evaluate(self, workspace, commit, checkpoint, name, splits, probe=False, timeout=1800.0):
        self._observer.evaluating(name, splits)
        try:
            return self._runner.evaluate(workspace, commit, checkpoint, name, splits, probe=probe, timeout=timeout)
        finally:
            self._observer.ran()


class _CountingTranscript(Transcript):
    """The proposal's transcript, telling the observer of each tool call as it is written."""

    def __init__(self, inner: Transcript, on_tool_call):
        super().__init__(inner.path)
        self._on_tool_call, self._calls = on_tool_call, 0

    def event(self, type_: str, **fields) -> None:
        super().event(type_, **fields)
        if type_ == "tool_call":
            self._calls += 1
            self._on_tool_call(self._calls)


class ObservedProposer:
    """A proposer that tells the observer when it proposes and how many tool calls it has made so far."""

    def __init__(self, proposer, observer: ProgressObserver, label: str):
        self._proposer, self._observer, self.label = proposer, observer, label

    def __getattr__(self, name):
        return getattr(self._proposer, name)

    def propose(self, context, transcript: Transcript):
        experiment_id = context.experiment_id
        self._observer.proposing(experiment_id, self.label)
        counting = _CountingTranscript(
            transcript, lambda count: self._observer.tool_calls(experiment_id, self.label, count))
        try:
            return self._proposer.propose(context, counting)
        finally:
            self._observer.proposed(experiment_id)
