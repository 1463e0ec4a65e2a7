"""Compute measured by the harness, where a track's budget is not the harness's clock.

On a track budgeted in steps or FLOPs the seal counts the training tokens make_dataloader handed out, and the
FLOPs per token of the weights sealed; neither sees a run that trains each batch it drew several times (epochs
over the same batches, extra passes, a bigger model used for training than the one sealed). So every run is also
held to what the harness itself measured of it up to its seal: the CPU seconds the kernel charged to its
processes (on the CPU), or the wall seconds from its start to its seal (on a GPU, where it has a device of its
own). Its budget's cost on this machine is the median of the baseline's runs on the same hardware; a run may use
COMPUTE_TOLERANCE times that, more where it draws more tokens than the baseline (compute_allowed: at the same
FLOPs an honest run's per-token costs grow with its tokens, measured in benchmarks/compute_spread.py,
BENCHMARKS.md "Compute the count cannot see"). What stays possible: laundering under that tolerance, a little more
in a model that draws more tokens than it needs (each extra token buys TOKEN_COST_SHARE of its cost). Runs of a
commit already kept (its noise floor, its controls) are not held to it again.

A second, cheap signal: the steps the run says it took, at the batch train.py declares, must not have needed
more tokens than the seal counted.
"""

from __future__ import annotations

import statistics
from typing import Any

from agent.recording.record import ExperimentRecord, ExperimentStatus, summary_number
from trainer.tracks.spec import TrackConstants

COMPUTE_TOLERANCE = 1.5
# The share of the baseline's cost that grows with the tokens drawn (the rest is start-up and FLOPs, the same at
# the budget): 0.36 on the cpu track (BENCHMARKS.md "Compute the count cannot see": DEPTH 6 against the baseline),
# rounded up. Drawing tokens it throws away buys a run only that share of allowance per token, not all of it.
TOKEN_COST_SHARE = 0.4
# On a wall-clock track: what a run may spend before its own clock starts (startup, compilation, the warm-up steps
# train.py does not count), past the most the baseline's runs spent there: a quarter of that again (a changed model
# compiles longer), and a twentieth of the budget, at least UNCOUNTED_FLOOR_S (a start-up's jitter). Every second of
# it is a second a train.py whose clock lies can train uncounted: it is kept narrow.
UNCOUNTED_MARGIN, UNCOUNTED_BUDGET_SHARE, UNCOUNTED_FLOOR_S = 0.25, 0.05, 2.0


def spent(run: Any) -> float | None:
    """What a run (a RunResult or a RunEntry) used up to its seal, as the harness measured it."""
    return run.seal_seconds if run.device == "cuda" else run.cpu_seconds


def uncounted(run: Any, constants: TrackConstants) -> float | None:
    """On a wall-clock track, the seconds from a run's start to its seal beyond the budget its clock counts."""
    if constants.budget != "wall" or run.seal_seconds is None:
        return None
    return max(0.0, run.seal_seconds - constants.time_budget)


def baseline_runs(records: list[ExperimentRecord], run: Any) -> list[Any]:
    """The baseline's runs on the run's hardware and device: what the budget costs on this machine."""
    if not (kept := [r for r in records if r.status == ExperimentStatus.KEEP]):
        return []
    key = run.hardware.key if run.hardware is not None else None
    return [entry for r in records if r.commit == kept[0].commit and r.status in (
                ExperimentStatus.KEEP, ExperimentStatus.NOISE, ExperimentStatus.CONTROL)
            for entry in r.runs
            if entry.device == run.device and (entry.hardware.key if entry.hardware else None) == key]


def over_compute(run: Any, records: list[ExperimentRecord], constants: TrackConstants,
                 declared_batch: int | None) -> str | None:
    """Why a run that reached its seal used more than its budget allows on this machine, or None."""
    if constants.budget == "cpu":
        return None  # the seal holds such a run to its CPU seconds itself
    if not constants.counted:
        return _over_clock(run, records, constants)
    steps = summary_number(run.summary.get("num_steps"))
    if steps is not None and declared_batch and run.trained_tokens is not None \
            and steps * declared_batch > run.trained_tokens:
        return (f"it says it took {steps:,.0f} steps of {declared_batch:,} tokens (TOTAL_BATCH_SIZE), but drew only "
                f"{run.trained_tokens:,} training tokens through make_dataloader: it trained batches more than once "
                "(a train.py whose steps differ in size reports num_steps as the tokens it trained over "
                "TOTAL_BATCH_SIZE)")
    allowed, used = compute_allowed(records, run), spent(run)
    if allowed is None or used is None or used <= allowed[1]:
        return None
    unit = "wall seconds to its seal" if run.device == "cuda" else "CPU seconds"
    return (f"it used {used:,.0f} {unit} before its seal, where the baseline's runs used {allowed[0]:,.0f} on "
            f"this machine and a run that draws {run.trained_tokens or 0:,} training tokens may use {allowed[1]:,.0f} "
            f"({COMPUTE_TOLERANCE}x, more where it draws more tokens than the baseline): it computed what the "
            "count cannot see (batches trained again, a model larger than the one it sealed, threads spinning)")


def compute_allowed(records: list[ExperimentRecord], run: Any) -> tuple[float, float] | None:
    """(the baseline's cost on this machine, what this run may use), None before the baseline was measured here.
    What an honest run costs beyond its fixed part grows with the tokens it draws (the loss over the vocabulary,
    norms, the optimizer's steps): a model half as deep draws 3.3x the tokens and costs 1.9x on the cpu track."""
    base = baseline_runs(records, run)
    if not (costs := [value for entry in base if (value := spent(entry))]):
        return None
    cost = statistics.median(costs)
    tokens = [entry.trained_tokens for entry in base if entry.trained_tokens]
    scale = max(1.0, run.trained_tokens / statistics.median(tokens)) if tokens and run.trained_tokens else 1.0
    return cost, COMPUTE_TOLERANCE * cost * (1 + TOKEN_COST_SHARE * (scale - 1))


def _over_clock(run: Any, records: list[ExperimentRecord], constants: TrackConstants) -> str | None:
    spent_before = uncounted(run, constants)
    measured = [value for entry in baseline_runs(records, run) if (value := uncounted(entry, constants)) is not None]
    if spent_before is None or not measured:
        return None
    most = max(measured)
    allowed = most * (1 + UNCOUNTED_MARGIN) + max(UNCOUNTED_BUDGET_SHARE * constants.time_budget, UNCOUNTED_FLOOR_S)
    if spent_before <= allowed:
        return None
    return (f"it reached its seal {spent_before:,.0f} s past the {constants.time_budget:g} s its clock counts; the "
            f"baseline's runs spent at most {most:,.0f} s there (startup, compilation, uncounted warm-up) and a "
            f"run may spend {allowed:,.0f} s: what it does before its clock starts trains outside the budget")

