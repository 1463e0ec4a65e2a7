"""What the harness's own evaluator (trainer/evaluator/evaluate.py) found, typed, and how its process ended.

The evaluator writes its Evaluation to a pipe the harness hands it (RESULT_FD_FLAG), never to its log, which the
model server's output shares; evaluate_commit reads it back into an EvaluationOutcome, and a spool worker or a Ray
node sends that outcome back as it is.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, ValidationError

RESULT_FD_FLAG = "--result-fd"
RESULT_LIMIT = 1 << 16  # bytes read from the pipe: an Evaluation is a few hundred
SPLITS = ("val", "holdout")  # what the evaluator scores; val always


class Evaluation(BaseModel):
    """Bits per byte of the splits asked for, and the worst that each check of the model server's answers saw
    (trainer/evaluator/evaluate.py says how each is measured). A NaN or an infinity is no score: such a result does
    not parse, and weights that produce one cannot be verified."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    device: str             # where the model server ran: cpu or cuda
    audit: float            # nats per token between the losses it reported and those its own logits give
    audited_tokens: int
    repeat: float           # nats per token between two scorings of the same batch, the second at the end
    lookahead: float        # how far the logits before a probe's first replaced token moved
    probes: int             # probes whose logits were compared with their original's
    val: float
    holdout: float | None = None


class EvaluationOutcome(BaseModel):
    """How the evaluator's process ended and the Evaluation it handed back; evaluation is None when it handed
    back none that parses (problem says which), and for a process that never started."""
    model_config = ConfigDict(extra="forbid")

    returncode: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    evaluation: Evaluation | None = None
    problem: str | None = None


def read_result(fd: int) -> tuple[Evaluation | None, str | None]:
    """(the Evaluation the evaluator wrote to the pipe's read end fd, or None with why); closes fd. Every writer
    has closed its end or died: what is not there by now never will be."""
    os.set_blocking(fd, False)
    text, chunk = b"", b"-"
    try:
        while chunk and len(text) <= RESULT_LIMIT:
            text += (chunk := os.read(fd, RESULT_LIMIT + 1))
    except BlockingIOError:  # a process the harness did not start still holds the write end
        return None, "its result pipe was still held open"
    finally:
        os.close(fd)
    if len(text) > RESULT_LIMIT:
        return None, "it handed back more than a result"
    if not text:
        return None, "it handed back no result"
    try:
        return Evaluation.model_validate_json(text), None
    except ValidationError:
        return None, "the result it handed back does not parse"
