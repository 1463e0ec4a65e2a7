"""How the night divides between new hyperparameter values and new code: per kind, how many experiments,
how many kept and what the keeps gained; and the share of code changes among a proposer's recent ones."""

from __future__ import annotations

import statistics

from pydantic import BaseModel

from agent.recording.novelty import ALGORITHMIC, NOVELTIES, Novelty
from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.recording.research_memory import proposed

RECENT = 10  # the experiments of a proposer whose share of code changes is compared with the share asked for


class KindTally(BaseModel):
    kind: Novelty
    experiments: int = 0
    share: float = 0.0          # of the labelled experiments
    keeps: int = 0
    mean_gain: float | None = None   # mean val_bpb gained by its keeps over the best each was judged against

    @property
    def keep_rate(self) -> float:
        return self.keeps / self.experiments if self.experiments else 0.0

    def line(self) -> str:
        gain = f", mean gain of keeps {self.mean_gain:.6f}" if self.mean_gain is not None else ""
        return (f"{self.kind} {self.experiments} ({self.share:.0%}), {self.keeps} kept "
                f"(keep rate {self.keep_rate:.0%}){gain}")


def labelled(records: list[ExperimentRecord]) -> list[ExperimentRecord]:
    """The proposed experiments that carry a label (decided ones; older ledgers have none)."""
    return [r for r in records if proposed(r) and r.novelty is not None and r.status != ExperimentStatus.PENDING]


def tally(records: list[ExperimentRecord]) -> list[KindTally]:
    experiments = labelled(records)
    if not experiments:
        return []
    tallies = []
    for kind in NOVELTIES:
        mine = [r for r in experiments if r.novelty == kind]
        keeps = [r for r in mine if r.status == ExperimentStatus.KEEP]
        gains = [r.evidence.gain for r in keeps if r.evidence.gain is not None]
        tallies.append(KindTally(kind=kind, experiments=len(mine), share=len(mine) / len(experiments),
                                 keeps=len(keeps), mean_gain=statistics.fmean(gains) if gains else None))
    return tallies


def recent_algorithmic_share(records: list[ExperimentRecord], proposer: str, window: int = RECENT) -> float | None:
    """The share of code changes among the proposer's last `window` labelled experiments; None before its first."""
    recent = [r for r in labelled(records) if r.proposer == proposer][-window:]
    return sum(r.novelty == ALGORITHMIC for r in recent) / len(recent) if recent else None
