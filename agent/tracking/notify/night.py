"""A night's notifications: what the ledger gained since the last look, and the loop's stop and the night's end
as `run` tells them, handed to a Sender per --notify URL.

The ledger is read every few seconds from a thread of its own (and once more when the loop stops), as the MLflow
mirror reads it, so the loop does not know it is watched: a keep (not the baseline's), a crash streak (every
CRASH_STREAK experiments in a row that crashed) and a plateau are each one notification.
"""

from __future__ import annotations

import threading
from itertools import takewhile
from pathlib import Path

from agent.judging.plateau import describe
from agent.recording.history import History
from agent.recording.ledger import read_records
from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.report.attention import attention_fallback
from agent.tracking.notify import events
from agent.tracking.notify.events import Notification
from agent.tracking.notify.formats import webhook
from agent.tracking.notify.sender import RetryPolicy, Sender, drain

CRASH_STREAK = 3
POLL_SECONDS = 5.0
DRAIN_SECONDS = 30.0  # at the night's end, how long `run` waits for notifications still being sent


def webhook_problem(urls: list[str]) -> str | None:
    """What is wrong with the --notify URLs, if anything (without showing them whole)."""
    for number, url in enumerate(urls, 1):
        try:
            webhook(url, number)
        except ValueError as err:
            return str(err)
    return None


class LedgerWatch:
    """The notifications the records appended to a workspace's ledger since the last look call for."""

    def __init__(self, directory: Path, tag: str, crash_streak: int = CRASH_STREAK):
        self.directory, self.tag, self.crash_streak = directory, tag, crash_streak
        records = read_records(directory)
        self.seen = len(records)
        best = History(records).best()
        self.best = best.val_bpb if best else None
        self.fallback_said = any(attention_fallback(r.summary) for r in records)  # once a night: every run will
        experiments = reversed([r for r in records if r.is_experiment])  # a resumed tag's streak goes on
        self.crashes = sum(1 for _ in takewhile(lambda r: r.status == ExperimentStatus.CRASH, experiments))

    def new(self) -> list[Notification]:
        records = read_records(self.directory)
        fresh, self.seen = records[self.seen:], len(records)
        return [notification for record in fresh for notification in self._of(record)]

    def _of(self, record: ExperimentRecord) -> list[Notification]:
        if not record.is_experiment or record.status == ExperimentStatus.INTERRUPTED:
            return []
        said = []
        if record.status == ExperimentStatus.KEEP and record.val_bpb is not None:
            if record.proposer != "baseline" and self.best is not None:
                said.append(events.keep(self.tag, record.id, record.description, record.val_bpb, self.best))
            self.best = record.val_bpb if self.best is None else min(self.best, record.val_bpb)
        self.crashes = self.crashes + 1 if record.status == ExperimentStatus.CRASH else 0
        if self.crashes and self.crashes % self.crash_streak == 0:
            said.append(events.crash_streak(self.tag, record.id, self.crashes, self.best))
        if not self.fallback_said and (why := attention_fallback(record.summary)):
            said.append(events.attention_fallback(self.tag, record.id, why, self.best))
            self.fallback_said = True
        if record.plateau is not None:
            said.append(events.plateau(self.tag, record.id, record.plateau.streak, describe(record), self.best))
        return said


class NightNotifier:
    def __init__(self, workspace, urls: list[str], say=print, policy: RetryPolicy | None = None,
                 poll_seconds: float = POLL_SECONDS, crash_streak: int = CRASH_STREAK):
        self.workspace, self.say, self.poll_seconds = workspace, say, poll_seconds
        self.hooks = [webhook(url, number) for number, url in enumerate(urls, 1)]
        self.senders = [Sender(hook, say, policy or RetryPolicy()) for hook in self.hooks]
        self.watch = LedgerWatch(workspace.dir, workspace.tag, crash_streak)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> NightNotifier:
        def watch() -> None:
            while not self._stop.wait(self.poll_seconds):
                self.check()
        self._thread = threading.Thread(target=watch, name="notify-watch", daemon=True)
        self._thread.start()
        return self

    def check(self) -> None:
        with self._lock:
            try:
                found = self.watch.new()
            except OSError:  # the ledger unreadable for a moment: the next look catches up
                return
            for notification in found:
                self.send(notification)

    def send(self, notification: Notification) -> None:
        for sender in self.senders:
            sender.put(notification)

    def stopped(self, why: str) -> None:
        """The loop stopped: the last records' notifications, then why."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.poll_seconds + 5)
        self.check()
        self.send(events.stopped(self.workspace.tag, why, self.watch.best))

    def night_ended(self, report: Path) -> None:
        from agent.report.night import Night  # the report's own read model: the same numbers as its page
        self.send(events.night_ended(self.workspace.tag, Night(self.workspace).headline, str(report)))

    def close(self, seconds: float = DRAIN_SECONDS) -> int:
        """Waits up to `seconds` for what is queued to be sent; says what was not and returns how many."""
        self._stop.set()
        if unsent := drain(self.senders, seconds):
            self.say(f"notifications: {unsent} not sent within {seconds:.0f} s; the night's records are complete")
        return unsent
