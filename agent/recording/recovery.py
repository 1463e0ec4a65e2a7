"""Recovering from a loop that died: each experiment it left in flight is recorded once as
interrupted, processes still working in its run directories are stopped, and the workspace
is reset to the best commit."""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from pathlib import Path

from agent.recording.ledger import Ledger, read_in_flight
from agent.recording.record import ExperimentRecord, ExperimentStatus, now
from agent.recording.transcript import Transcript
from agent.workspace import Workspace
from trainer.runs.triage import Triage


def settle_interrupted(workspace: Workspace, ledger: Ledger, say=print) -> None:
    kill_orphans(workspace.runs_dir)  # also the runs of a noise floor, which has no in-flight marker
    for draft in read_in_flight(ledger.jsonl.parent):
        if not ledger.has(draft.id):
            transcript = Transcript(workspace.dir / "transcripts" / f"{draft.id}.jsonl")
            record_interrupted(workspace, ledger, draft, ledger.head(), transcript)
            say(f"{draft.id} was interrupted by a stopped loop; recorded once as interrupted")
    ledger.clear_in_flight()  # unreadable markers too: every experiment they could name is settled
    if (best := ledger.head()) is not None and (workspace.head() != best.commit or not workspace.is_clean()):
        workspace.reset_to(best.commit)


def record_interrupted(workspace: Workspace, ledger: Ledger, draft: ExperimentRecord, best: ExperimentRecord | None,
                       transcript: Transcript) -> None:
    """The experiment's draft recorded as interrupted, with what it had spent and the runs it had finished."""
    workspace.reset_to(best.commit if best else draft.parent)
    draft.status, draft.triage = ExperimentStatus.INTERRUPTED, Triage.INTERRUPTED.value
    draft.reason, draft.val_bpb, draft.peak_vram_mb = "the loop stopped while this experiment ran", None, None
    draft.summary, draft.transcript, draft.finished = {}, str(transcript.path.relative_to(workspace.dir)), now()
    ledger.append(draft)
    ledger.finish(draft.id)
    transcript.event("interrupted", reason=draft.reason)


def kill_orphans(runs_dir: Path) -> None:
    """SIGKILL processes still working in a run directory of this workspace (Linux /proc)."""
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if cwd.is_relative_to(runs_dir) and int(entry.name) != os.getpid():
            with suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
