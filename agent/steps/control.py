"""A control run of the best (agent/judging/drift.py): its commit trained once more with a fresh seed, beside
the experiments, its number taken from the trusted evaluator, and recorded as a control row whose run is pooled
into the best's runs from then on, unless it disagrees with them (then held back, and the best re-measured)."""

from __future__ import annotations

import time

from agent.judging.drift import control_words, drift_of
from agent.recording.history import History
from agent.recording.record import ExperimentRecord, ExperimentStatus, RunEntry, Timings, now
from agent.recording.transcript import Transcript
from agent.steps.training import LoopStopped, Training
from trainer.runs.run_id import RunId
from trainer.runs.triage import Triage


def run_control(training: Training, best: ExperimentRecord, seed: int, say=print) -> ExperimentRecord:
    """Trains the best's commit once with `seed`, records the control row and says what it found."""
    workspace, shared = training.workspace, training.shared
    ledger, started, started_at = shared.ledger, time.monotonic(), now()
    with shared.lock:
        number = 1 + sum(1 for r in ledger.records if r.status == ExperimentStatus.CONTROL and r.of == best.id)
    record_id = f"{best.id}-control{number}"
    transcript = Transcript(workspace.dir / "transcripts" / f"{record_id}.jsonl")
    transcript.event("control_started", of=best.id, commit=best.commit, seed=seed)
    result = training.run(best.commit, RunId.train(record_id), seed, transcript)
    if result.verdict.triage == Triage.INFRA:
        raise LoopStopped(f"a control run of the best failed twice for a reason outside the experiment: "
                          f"{result.verdict.reason}. Fix the machine or the data, then run again")
    run = RunEntry.of(result, seed, workspace.dir)
    # pooled into the best's runs, so its number must be the trusted evaluator's
    training.verified(best.commit, run, transcript, f"the control run of {best.id}", say)
    with shared.lock:
        shared.check()
        history = ledger.history()
        earlier = history.runs_of(best.commit)
        measured = run.val_bpb is not None and bool(earlier)
        previous = next((r for r in reversed(history.records) if r.status == ExperimentStatus.CONTROL
                         and r.of == best.id and r.drift is not None), None)
        drift = drift_of(earlier, run.val_bpb, history.sigma(), previous,
                         not workspace.track.constants.counted) if measured else None
        record = ExperimentRecord(
            id=record_id, status=ExperimentStatus.CONTROL, triage=run.triage, of=best.id, parent=best.commit,
            commit=best.commit, description=f"control: {best.id} re-run with seed {seed}", val_bpb=run.val_bpb,
            runs=[run], values=None, drift=drift, peak_vram_mb=None,
            timings=Timings(run_s=run.seconds, total_s=round(time.monotonic() - started, 3)),
            transcript=str(transcript.path.relative_to(workspace.dir)), started=started_at, finished=now())
        record.values = History([*history.records, record]).runs_of(best.commit)
        record.reason = control_words(record)
        ledger.append(record)
        shared.checkpoints.release(record_id)
        ledger.prune_checkpoints(shared.checkpoints.in_use())
    transcript.event("control", of=best.id, val_bpb=run.val_bpb, pooled=record.values,
                     drift=record.drift.model_dump() if record.drift else None)
    say(f"{'warning: ' if record.drift and record.drift.flagged else ''}{record.reason}")
    return record
