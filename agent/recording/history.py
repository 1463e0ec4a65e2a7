"""The questions every rule and view asks of a workspace's records, answered in one place."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from agent.recording.record import ExperimentRecord, ExperimentStatus


class History:
    """A snapshot of the records, oldest first: experiments, noise floors and control runs."""

    def __init__(self, records: Iterable[ExperimentRecord]):
        self.records = list(records)

    def experiments(self) -> list[ExperimentRecord]:
        return [r for r in self.records if r.is_experiment]

    def kept(self) -> list[ExperimentRecord]:
        return [r for r in self.records if r.status == ExperimentStatus.KEEP]

    def head(self) -> ExperimentRecord | None:
        """The last keep: the branch head, what the loop builds on and judges against."""
        return next(reversed(self.kept()), None)

    def best(self) -> ExperimentRecord | None:
        """The keep with the lowest val_bpb of record (the mean of its runs, see runs_of), the later of equals: what
        every view names as the best. In a night this loop ran it is the head but for a keep that simplified at a
        small cost; in an imported night an agent may have kept a worse change last."""
        best, lowest = None, None
        for record in self.kept():
            if (values := self.runs_of(record.commit)) and (lowest is None or statistics.fmean(values) <= lowest):
                best, lowest = record, statistics.fmean(values)
        return best or self.head()

    def holdout_anchor(self) -> ExperimentRecord | None:
        """The last keep whose fall the holdout split checked, else the baseline: falls are measured from it, so
        that steps each under the implausible line still meet the holdout split once they add up past it."""
        kept = self.kept()
        checked = [r for r in kept[1:] if r.evidence.implausible_fall]
        return checked[-1] if checked else next(iter(kept), None)

    def baseline(self) -> ExperimentRecord | None:
        return next(iter(self.kept()), None)

    def runs_of(self, commit: str) -> list[float]:
        """val_bpb of every successful run of a kept commit: its experiment's runs, its noise runs and its control
        runs, pooled, but for a control held back (agent/judging/drift.py). A number brought in by `autoresearch
        import` was printed under another harness: it counts only until this harness has measured the commit."""
        held_back = self.held_back_controls()
        pooled = [(r.imported is not None, value) for r in self.records
                  if r.commit == commit and r.id not in held_back
                  and r.status in (ExperimentStatus.KEEP, ExperimentStatus.NOISE, ExperimentStatus.CONTROL)
                  for value in r.measured]
        measured_here = [value for imported, value in pooled if not imported]
        return measured_here or [value for _, value in pooled]

    def held_back_controls(self) -> set[str]:
        """Ids of the control runs that disagreed with the best's earlier runs and were not shown to be the
        machine's conditions by the next control: never part of a mean a decision uses."""
        controls = [r for r in self.records if r.status == ExperimentStatus.CONTROL and r.drift is not None]
        confirmed = {r.drift.confirms for r in controls if r.drift.confirms}
        return {r.id for r in controls if r.drift.pooled is False and r.id not in confirmed}

    def sigma(self) -> float | None:
        """sigma of val_bpb from the latest noise floor, None before one was measured."""
        floors = [r for r in self.records if r.status == ExperimentStatus.NOISE and r.sigma is not None]
        return floors[-1].sigma if floors else None

    def sigma_df(self) -> int | None:
        """The degrees of freedom of sigma: the latest noise floor's values less one, None before a floor."""
        floors = [r for r in self.records if r.status == ExperimentStatus.NOISE and r.sigma is not None]
        return len(floors[-1].values) - 1 if floors and floors[-1].values and len(floors[-1].values) > 1 else None

    def best_ever_mean(self) -> float | None:
        """The lowest mean of the runs of any commit that was the best."""
        return min((statistics.fmean(values) for r in self.kept() if (values := self.runs_of(r.commit))), default=None)
