"""What a compile cache of its own costs a run: the same commit trained twice by the LocalRunner, each run in
a fresh run directory whose compile cache is its own and empty (nothing of one run is read by another).

    python benchmarks/compile_cache.py [--track test|cpu] [--compile]

With --compile, train.py compiles on the CPU too (COMPILE_ON_CPU = True), as every run on the gpu track
does; without it, the track's default. Prints a table of each run's startup, uncounted warm-up (where the
compile happens), training, evaluation and total seconds, and tokens/s; numbers go into BENCHMARKS.md with
the machine.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from agent.running.runner import LocalRunner
from agent.workspace import Workspace
from trainer.runs.jobs import Job
from trainer.runs.run_id import RunId
from trainer.tracks.hyperparameters import set_hyperparameters

PROGRAM = Path(__file__).resolve().parents[1] / "prompts" / "program.md"
COLUMNS = ("startup_seconds", "warmup_seconds", "training_seconds", "eval_seconds", "total_seconds",
           "tokens_per_second")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--track", default="test", choices=("test", "cpu"))
    parser.add_argument("--compile", action="store_true", help="COMPILE_ON_CPU = True")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args()
    from trainer.tracks.builder import prepare_track
    cache = (args.cache or Path(os.environ.get("AUTORESEARCH_CACHE", "~/.cache/autoresearch"))).expanduser()
    os.environ["AUTORESEARCH_CACHE"] = str(cache)
    spec = prepare_track(args.track, cache=cache, show_progress=False).spec
    workspace = Workspace.create("compile-cache", spec, PROGRAM, root=Path(tempfile.mkdtemp()) / "workspaces")
    if args.compile:
        source = set_hyperparameters(workspace.file_at("train.py"), {"COMPILE_ON_CPU": True})
        workspace.advance_to(workspace.commit_train(source, "compile on the CPU"))
    runner, timeout = LocalRunner(), 1800.0
    print(f"track {args.track}, COMPILE_ON_CPU {args.compile}: each run starts with an empty compile cache of its own")
    print("| run | " + " | ".join(COLUMNS) + " |\n|---|" + "---|" * len(COLUMNS))
    for number in range(1, args.runs + 1):
        result = runner.run(workspace, Job(run=RunId.train(f"{number:04d}"), commit=workspace.head(), seed=42 + number,
                                             timeout=timeout))
        summary = result.summary
        print(f"| {number} | " + " | ".join(summary.get(key, "?") for key in COLUMNS) + " |", flush=True)


if __name__ == "__main__":
    main()
