"""What honest changes cost on this machine, against the baseline, where a track's budget is not a clock.

Each change is its own commit of the track's baseline train.py, trained through the local runner (the sandbox,
the seal) two at a time with the same seed; the table shows the CPU seconds the harness read from the kernel at
each run's seal, the wall seconds to the seal, the steps and tokens the run took, the ratio to the baseline's
median CPU seconds and the ratio the compute check (agent/judging/compute.py compute_allowed) allows the run: the
honest rows must stay under it, and a run that trains its batches twice (as the red team's epochs did) go over.

    .venv/bin/python benchmarks/compute_spread.py [--track cpu] [--change DEPTH=2 ...] [--repeats 3]
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT_CHANGES = ["DEPTH=2", "DEPTH=3", "DEPTH=6", "TOTAL_BATCH_SIZE=2**11", "TOTAL_BATCH_SIZE=2**13",
                   "COMPILE_ON_CPU=True", "EPOCHS=2"]


def parsed(change: str) -> tuple[str, object]:
    name, _, value = change.partition("=")
    return name, ast.literal_eval(value) if "**" not in value else eval(value, {"__builtins__": {}})  # noqa: S307


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--track", default="cpu")
    parser.add_argument("--change", action="append", help="NAME=VALUE (repeatable)")
    parser.add_argument("--repeats", type=int, default=3, help="baseline runs")
    args = parser.parse_args()

    from agent.judging.compute import compute_allowed, spent
    from agent.recording.record import ExperimentRecord, ExperimentStatus, RunEntry
    from agent.running.runner import LocalRunner
    from benchmarks.warm_starts import screening_workspace
    from trainer.runs.jobs import Job
    from trainer.runs.run_id import RunId
    from trainer.tracks.hardware import this_machine
    from trainer.tracks.hyperparameters import set_hyperparameters

    spec, workspace, baseline, source = screening_workspace(args.track, "compute-spread-")
    jobs = [("baseline", baseline)] * args.repeats
    for name, value in map(parsed, args.change or DEFAULT_CHANGES):
        if name == "EPOCHS":
            changed = epochs(source, int(value))
        else:
            changed = set_hyperparameters(source, {name: value}, args.track)
        jobs.append((f"{name} = {value!r}", workspace.commit_train(changed, f"{name} = {value!r}", parent=baseline)))
    runner = LocalRunner(slots=2)
    budget = spec["constants"]["time_budget"]

    def train(numbered):
        number, (label, commit) = numbered
        result = runner.run(workspace, Job(run=RunId.train(f"c{number:02d}"), commit=commit, seed=42,
                                           timeout=40 * budget + 600))
        return label, result

    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(train, enumerate(jobs)))
    runs = [RunEntry(cpu_seconds=result.cpu_seconds, seal_seconds=result.seal_seconds, device=result.device,
                     hardware=result.hardware, trained_tokens=result.trained_tokens)
            for label, result in done if label == "baseline"]
    records = [ExperimentRecord(id="0000", status=ExperimentStatus.KEEP, commit=baseline, runs=runs)]
    print(f"{args.track} track on {this_machine().describe()}, {time.strftime('%Y-%m-%d')}; baseline median "
          f"{statistics.median(spent(run) for run in runs):.1f} over {len(runs)} runs")
    print("| change | triage | val_bpb | steps | tokens | CPU s at seal | wall s to seal | x baseline | allowed x "
          "| check |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, result in done:
        used, allowed = spent(result), compute_allowed(records, result)
        ratio, room = (used / allowed[0], allowed[1] / allowed[0]) if used and allowed else (float("nan"),) * 2
        print(f"| {label} | {result.verdict.triage.value} | {result.summary.get('val_bpb', '-')} | "
              f"{result.summary.get('num_steps', '?')} | {result.trained_tokens or 0:,} | "
              f"{result.cpu_seconds or 0:.1f} | {result.seal_seconds or 0:.1f} | {ratio:.2f} | {room:.2f} | "
              f"{'over' if ratio > room else 'ok'} |")


def epochs(source: str, times: int) -> str:
    """train.py that passes forward and backward over each batch it draws `times` times: `times` the compute of
    the tokens the seal counts."""
    line = "            (loss / grad_accum_steps).backward()\n"
    if line not in source:
        raise SystemExit("train.py's training loop moved: update epochs() in benchmarks/compute_spread.py")
    again = ("            for _pass in range(%d):\n                with autocast:\n"
             "                    loss = train_model(x, y)\n                (loss / grad_accum_steps).backward()\n")
    return source.replace(line, line + again % (times - 1), 1)


if __name__ == "__main__":
    main()
