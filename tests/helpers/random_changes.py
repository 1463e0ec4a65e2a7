"""A control proposer: one hyperparameter of train.py's block set to a value drawn at random.

It draws from the search space the Optuna proposer searches (agent/proposers/optuna_search.py), uniformly
(log-uniformly for the log ranges), so that what TPE learns shows as the difference between the two.
"""

from __future__ import annotations

import math
import random

from agent.proposers.base import Proposal, ProposalContext, Proposer, ProposerError
from agent.proposers.edits import Edit
from agent.proposers.optuna_search import SearchDimension, search_space
from agent.recording.transcript import Transcript
from trainer.tracks.hyperparameters import set_hyperparameters

DRAWS = 20  # draws of a value before giving up on finding one that differs from the current one


def draw(dim: SearchDimension, rng: random.Random) -> float | int:
    """A value of the dimension's range, drawn uniformly (log-uniformly for log-float)."""
    if dim.kind == "pow2":
        return 2 ** rng.randint(int(dim.low), int(dim.high))
    if dim.kind == "int":
        return rng.randint(int(dim.low), int(dim.high))
    if dim.kind == "log-float":
        return float(f"{math.exp(rng.uniform(math.log(dim.low), math.log(dim.high))):.4g}")
    return float(f"{rng.uniform(dim.low, dim.high):.4g}")


def changed_line(old: str, new: str) -> tuple[str, str]:
    """The one line that differs between two versions of train.py, as (old, new)."""
    pairs = [(a, b) for a, b in zip(old.splitlines(), new.splitlines(), strict=True) if a != b]
    if len(pairs) != 1:
        raise ProposerError(f"setting one hyperparameter changed {len(pairs)} lines")
    return pairs[0]


class RandomChanges(Proposer):
    name = "random"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def propose(self, context: ProposalContext, transcript: Transcript) -> Proposal:
        space = search_space(context.train_source)
        if not space:
            raise ProposerError("the hyperparameter block holds no numeric values to change")
        for _ in range(DRAWS):
            dim = space[self.rng.choice(sorted(space))]
            value = draw(dim, self.rng)
            if value != dim.value:
                break
        else:
            raise ProposerError(f"{DRAWS} random draws all gave the current values")
        old_line, new_line = changed_line(context.train_source,
                                          set_hyperparameters(context.train_source, {dim.name: value}))
        transcript.event("reasoning", text=f"random control: {dim.name} {dim.value} -> {value} "
                                           f"(drawn from {dim.describe()})")
        return Proposal(description=f"{dim.name} {dim.value} -> {value}",
                        edits=[Edit(old_string=old_line, new_string=new_line)],
                        meta={"parameter": dim.name, "old": dim.value, "new": value},
                        hypothesis=f"a random draw of {dim.name} (a control for the search)",
                        expected="none: the draw ignores every result")
