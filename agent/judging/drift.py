"""Control runs of the best, against drift of the machine's conditions.

A best measured once on an idle machine is a bar no later candidate clears once the machine gets busier (a CPU
second under load does less work) or a GPU throttles. So the best's commit is trained again with a fresh seed
(a control run): once when it becomes the best, unless a noise floor re-runs it anyway, and again every
`control_every` experiments without a keep. A control that agrees with the best's earlier runs (within
DRIFT_SIGMAS sigma) is pooled into them (History.runs_of) where the budget follows the machine's speed, so every
decision compares with a mean that follows the conditions.

A control that disagrees is flagged and held back: a train.py can behave worse on some of its own runs (the
ones it guesses are controls) to move the bar for the next change, so a run that disagrees never moves it by
itself. It makes another control due at once (the best re-measured with a fresh seed). On a track whose budget
follows the machine's speed, a second control that moves the same way shows the conditions changed: both are
pooled. On a track budgeted in steps or FLOPs the conditions cannot change, so no control is pooled there (a run
made a little worse, inside 2 sigma, would still move the bar): a control is a check, and a flagged one says the
best's runs vary by more than its seeds, which is suspect.

Without a noise floor (noise_seeds 0: single runs compared) no control runs either.
"""

from __future__ import annotations

import statistics

from agent.judging.noise import wants_noise_floor
from agent.recording.history import History
from agent.recording.record import Drift, ExperimentRecord, ExperimentStatus
from agent.settings import LoopSettings

DRIFT_SIGMAS = 2.0


def control_due(records: list[ExperimentRecord], settings: LoopSettings) -> ExperimentRecord | None:
    """The best, when a control run of it is due now; else None."""
    if settings.control_every <= 0 or settings.noise_seeds <= 0:
        return None
    if wants_noise_floor(records, settings.noise_seeds, settings.noise_every_keeps):
        return None  # the floor re-runs the best: a control beside it would only repeat it
    history = History(records)
    if (best := history.head()) is None:
        return None
    became = max(i for i, r in enumerate(records) if r.status == ExperimentStatus.KEEP)
    reruns = [i for i in range(became + 1, len(records))
              if not records[i].is_experiment and records[i].commit == best.commit]
    if not reruns:
        return best  # a new best is never one draw
    held_back = history.held_back_controls()
    disagreed = [r.id in held_back and r.drift is not None and r.drift.flagged
                 for r in (records[i] for i in reruns) if r.status == ExperimentStatus.CONTROL]
    if disagreed and disagreed[-1] and (len(disagreed) < 2 or not disagreed[-2]):
        return best  # re-measured at once when a control disagreed
    since = sum(1 for r in records[reruns[-1] + 1:] if r.is_experiment)
    return best if since >= settings.control_every else None


def drift_of(earlier: list[float], control: float, sigma: float | None, previous: ExperimentRecord | None,
             follows_speed: bool) -> Drift:
    """How far a control run moved from the mean of the best's earlier runs, flagged past DRIFT_SIGMAS sigma, and
    whether it is pooled; previous is the best's control before it, if any."""
    mean = statistics.fmean(earlier)
    moved = control - mean
    flagged = sigma is not None and abs(moved) > DRIFT_SIGMAS * sigma
    drift = Drift(earlier_mean=round(mean, 6), earlier_runs=len(earlier), moved=round(moved, 6), sigma=sigma,
                  flagged=flagged, pooled=follows_speed and not flagged, suspect=flagged and not follows_speed)
    before = previous.drift if previous is not None else None
    if flagged and follows_speed and before is not None and before.flagged and before.pooled is False \
            and (before.moved > 0) == (moved > 0):
        drift.pooled, drift.confirms = True, previous.id
    return drift


def control_words(control: ExperimentRecord) -> str:
    """What a control run found, as one sentence for the run log, `status` and the report."""
    said = f"control {control.id} of the best {control.of}"
    drift, pooled = control.drift, control.values or []
    if control.val_bpb is None or drift is None:
        return f"{said} produced no number ({control.triage}); the best's runs are unchanged"
    said += (f": val_bpb {control.val_bpb:.6f}, {drift.moved:+.6f} from its earlier mean {drift.earlier_mean:.6f} "
             f"of {drift.earlier_runs} run(s)")
    if drift.flagged:
        said += f", more than {DRIFT_SIGMAS:g} sigma ({DRIFT_SIGMAS * drift.sigma:.6f}): drift flagged"
        if drift.confirms:
            said += (f"; as {drift.confirms} before it: the machine's conditions changed (other work on it, a "
                     "throttled GPU), so both are pooled")
        elif drift.pooled is False:
            said += ("; held back, not pooled: a run that disagrees with the best's earlier runs never moves the bar "
                     "by itself. " + ("Suspect: this track's budget counts steps or FLOPs, so the machine's "
                                      "conditions cannot explain it; the best's runs vary by more than its seeds"
                                      if drift.suspect else "The best is re-measured now"))
        else:
            said += (": the machine's conditions changed (other work on it, a throttled GPU; on a track budgeted "
                     "in steps or FLOPs they cannot), or the best's earlier runs were luckier than its seeds usually "
                     "are")
    elif drift.sigma is not None:
        said += f", within {DRIFT_SIGMAS:g} sigma ({DRIFT_SIGMAS * drift.sigma:.6f})"
    if not drift.flagged and drift.pooled is False:
        said += ("; a check only: on a track budgeted in steps or FLOPs the machine cannot change how a run trains, "
                 "so the best's mean stays that of its own runs")
    if pooled:
        said += f"; decisions use the mean {statistics.fmean(pooled):.6f} of its {len(pooled)} pooled runs"
    return said


def flagged_controls(records: list[ExperimentRecord]) -> list[ExperimentRecord]:
    return [r for r in records if r.status == ExperimentStatus.CONTROL and r.drift is not None and r.drift.flagged]
