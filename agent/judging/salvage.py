"""Salvage: a run that died after it sealed its weights is scored from them instead of being lost.

A run trains, hands its weights over at the seal (trainer/sandbox/seal.py), then evaluates them itself. If it dies there
(its evaluation ran out of memory or raised, it hung until the harness ended it, or its process was killed), the
weights it sealed are still the weights of record: the trusted evaluator (trainer/evaluator/evaluate.py, the one
verification uses) scores them, with a smaller batch where the run ran out of memory, and the run is judged on
that number, flagged salvaged. What the run printed before it died stands for nothing. Where the weights cannot
be scored the run stays the crash it was; where the model's answers fail the evaluator's checks it is tamper.

Not salvaged: a run refused at the seal (over budget, tamper) or killed before it sealed, which has no weights of
record; a run the machine failed (infra: retried, then the loop stops); a run that said itself that its training
failed (diverged).
"""

from __future__ import annotations

import dataclasses
import time

from agent.judging.tolerances import devices, night_tolerances
from agent.judging.verify import model_problem
from agent.recording.transcript import Transcript
from agent.running.evaluator import EvaluationFailed
from agent.running.runner import Runner, RunResult
from agent.workspace import Workspace
from trainer.evaluator.evaluate import MIN_BATCH_ROWS, batch_layout
from trainer.files.hashing import file_sha256
from trainer.runs.jobs import EvaluationJob
from trainer.runs.run_id import RunKind
from trainer.runs.run_result import Salvage
from trainer.runs.triage import Triage, Verdict

SALVAGEABLE = frozenset({Triage.FIXABLE, Triage.OOM, Triage.TIMEOUT})
OOM_BATCH_SHARE = 0.5  # of the evaluator's own batch rows, for the weights of a run that ran out of memory


def salvageable(result: RunResult) -> bool:
    """Whether the run died after its seal of a cause that leaves its sealed weights the weights of record."""
    return result.verdict.triage in SALVAGEABLE and result.checkpoint is not None


def smaller_batch(device: str) -> int:
    return max(MIN_BATCH_ROWS, int(batch_layout(device)[0] * OOM_BATCH_SHARE))


def salvage(workspace: Workspace, runner: Runner, commit: str, result: RunResult, transcript: Transcript) -> RunResult:
    """The salvageable run `result` judged on its sealed weights: ok with its Salvage when the trusted evaluator scored
    them, tamper when the model's answers cannot stand, the crash it was when they could not be scored."""
    if result.run is None:
        raise ValueError("only a run of this loop, whose RunId it knows, can be salvaged")
    crash = f"{result.verdict.triage.value}: {result.verdict.reason}"
    if not result.checkpoint.is_file() or file_sha256(result.checkpoint) != result.checkpoint_sha256:
        return _unsalvaged(result, transcript, crash, "its sealed weights were changed or removed since the seal")
    batch_rows = smaller_batch(result.device) if result.verdict.triage == Triage.OOM else None
    job = EvaluationJob(run=result.run.then(RunKind.SALVAGE), commit=commit, checkpoint=result.checkpoint,
                        probe=True, batch_rows=batch_rows)
    started = time.monotonic()
    try:
        evaluation = runner.evaluate(workspace, job)
    except EvaluationFailed as err:
        return _unsalvaged(result, transcript, crash,
                           f"the trusted evaluator could not score its sealed weights: {err}")
    seconds = round(time.monotonic() - started, 3)
    limits = night_tolerances(workspace, devices(evaluation, result.device), evaluation.device).limits
    if problem := model_problem(evaluation, limits):
        transcript.event("salvage", salvaged=False, crash=crash, problem=problem, batch_rows=batch_rows)
        verdict = Verdict(Triage.TAMPER, f"{crash}; its sealed weights were scored instead, and cannot stand: "
                                         f"{problem}", result.summary)
        return dataclasses.replace(result, verdict=verdict)
    transcript.event("salvage", salvaged=True, crash=crash, val_bpb=round(evaluation.val, 6), batch_rows=batch_rows,
                     device=evaluation.device, seconds=seconds)
    verdict = Verdict(Triage.OK, f"salvaged after {crash}; the trusted evaluator scored its sealed weights at "
                                 f"{evaluation.val:.6f}", result.summary)
    return dataclasses.replace(result, verdict=verdict, salvage=Salvage(crash=crash, evaluation=evaluation,
                                                                        seconds=seconds, batch_rows=batch_rows))


def _unsalvaged(result: RunResult, transcript: Transcript, crash: str, problem: str) -> RunResult:
    transcript.event("salvage", salvaged=False, crash=crash, problem=problem)
    return result
