"""Screens single changes of a track's baseline train.py as the demo would train them: each change on its
own commit, trained through the local runner with the seed the demo gives it (the baseline has 42, its noise
floor 43 and 44, the first two experiments 45 and 46), two runs at a time, one thread each.

On a FLOPs-budgeted track with one thread a run is deterministic for its seed, so the table says what the
demo's warm starts (agent/proposers/optuna_search.py WARM_STARTS) will show: against the baseline's runs
(seeds 42-44) a change is a clear keep when its gain exceeds 2 sigma and its fall stays under the
implausible-fall line (agent/judging/decisions.py), a clear discard when it gains nothing, else a close call
that the demo re-runs.

    .venv/bin/python benchmarks/warm_starts.py [--track cpu] [--change DEPTH=3@45 --change UNEMBEDDING_LR=0.008@46]
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT_CHANGES = ["DEPTH=3@45", "UNEMBEDDING_LR=0.008@46"]


def parsed(change: str) -> tuple[str, object, int]:
    setting, _, seed = change.partition("@")
    name, _, value = setting.partition("=")
    return name, ast.literal_eval(value), int(seed or 45)


def screening_workspace(track: str, prefix: str):
    """(the track's spec, a fresh workspace of it in a temporary directory, its baseline commit, its train.py)."""
    from agent.workspace import Workspace
    from trainer.tracks.builder import prepare_track

    spec = prepare_track(track, show_progress=False).spec
    workspace = Workspace.create("screen", spec, REPO / "prompts" / "program.md",
                                 root=Path(tempfile.mkdtemp(prefix=prefix)))
    baseline = workspace.head()
    return spec, workspace, baseline, workspace.file_at("train.py", baseline)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--track", default="cpu")
    parser.add_argument("--change", action="append", help="NAME=VALUE@SEED (repeatable)")
    args = parser.parse_args()

    from agent.judging.decisions import IMPLAUSIBLE_FALL
    from agent.running.runner import LocalRunner
    from trainer.runs.jobs import Job
    from trainer.runs.run_id import RunId
    from trainer.tracks.hardware import this_machine
    from trainer.tracks.hyperparameters import set_hyperparameters

    spec, workspace, baseline, source = screening_workspace(args.track, "warm-starts-")
    jobs = [("baseline", baseline, seed) for seed in (42, 43, 44)]
    for name, value, seed in map(parsed, args.change or DEFAULT_CHANGES):
        commit = workspace.commit_train(set_hyperparameters(source, {name: value}, args.track),
                                        f"{name} = {value!r}", parent=baseline)
        jobs.append((f"{name} = {value!r}", commit, seed))
    runner = LocalRunner(slots=2)
    budget = spec["constants"]["time_budget"]

    def train(job):
        label, commit, seed = job
        started = time.monotonic()
        result = runner.run(workspace, Job(run=RunId.train(f"{label.split()[0]}-{seed}"), commit=commit, seed=seed,
                                           timeout=40 * budget + 600))
        return label, seed, result.summary, time.monotonic() - started

    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(train, jobs))
    base = [float(summary["val_bpb"]) for label, _, summary, _ in done if label == "baseline"]
    mean, sigma = statistics.fmean(base), statistics.stdev(base)
    print(f"{args.track} track on {this_machine().describe()}, {time.strftime('%Y-%m-%d')}; baseline mean "
          f"{mean:.6f}, sigma {sigma:.6f} (seeds 42-44)")
    print("| change | seed | val_bpb | steps | wall s | gain vs seed 42 | fall | outcome |")
    print("|---|---|---|---|---|---|---|---|")
    for label, seed, summary, wall in done:
        value = float(summary.get("val_bpb", "nan"))
        gain = base[0] - value
        fall = gain / base[0]
        outcome = ("baseline" if label == "baseline" else "implausible fall: re-run, holdout gate"
                   if fall > IMPLAUSIBLE_FALL else "clear keep" if gain > 2 * sigma else
                   "clear discard" if gain <= 0 else "close call: re-run")
        print(f"| {label} | {seed} | {value:.6f} | {summary.get('num_steps', '?')} | {wall:.0f} | {gain:+.6f} | "
              f"{100 * fall:.1f}% | {outcome} |")


if __name__ == "__main__":
    main()
