"""What the harness's own evaluator (trainer/evaluate.py) found, typed.

The evaluator builds an Evaluation and prints it as the last line of its log, ``EVALUATION {json}``; whoever
reads that log, on whichever machine the evaluator ran, parses it back with evaluation_in. EvaluationOutcome is
how the evaluator's process ended, as a spool worker or a Ray node sends it back beside the log.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from trainer.sandbox import ProcessOutcome

RESULT_PREFIX = "EVALUATION "
SPLITS = ("val", "holdout")  # what the evaluator scores; val always
Outcome = TypeVar("Outcome", bound="EvaluationOutcome")


class Evaluation(BaseModel):
    """Bits per byte of the splits asked for, and the worst that each check of the model server's answers saw
    (trainer/evaluate.py says how each is measured). A NaN or an infinity is no score: such a line does not parse,
    and weights that produce one cannot be verified."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    device: str             # where the model server ran: cpu or cuda
    audit: float            # nats per token between the losses it reported and those its own logits give
    audited_tokens: int
    repeat: float           # nats per token between two scorings of the same batch, the second at the end
    lookahead: float        # how far the logits before a probe's first replaced token moved
    probes: int             # probes whose logits were compared with their original's
    val: float
    holdout: float | None = None

    def log_line(self) -> str:
        """The line the evaluator prints last."""
        return RESULT_PREFIX + json.dumps(self.model_dump(exclude_none=True))


def evaluation_in(lines: Iterable[str]) -> Evaluation | None:
    """The Evaluation of the last result line among lines, None when there is none; raises ValueError when that
    line is not one."""
    found = None
    for line in lines:
        if line.startswith(RESULT_PREFIX):
            found = line[len(RESULT_PREFIX):]
    return None if found is None else Evaluation.model_validate_json(found)


class EvaluationOutcome(BaseModel):
    """How the evaluator's process ended (its scores are in its log)."""
    model_config = ConfigDict(extra="forbid")

    returncode: int | None
    timed_out: bool
    seconds: float
    isolated: bool

    @classmethod
    def of(cls: type[Outcome], process: ProcessOutcome | None, **more: Any) -> Outcome:
        """The outcome of the evaluator's process; None for one that never started."""
        if process is None:
            return cls(returncode=None, timed_out=False, seconds=0.0, isolated=False, **more)
        return cls(returncode=process.returncode, timed_out=process.timed_out, seconds=process.seconds,
                   isolated=process.isolated, **more)
