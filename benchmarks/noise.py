"""Run-to-run noise of val_bpb: one track's baseline train.py trained with several seeds.

Each run goes through the local runner exactly as an experiment would (fresh run directory,
AUTORESEARCH_SEED from the harness). Prints every run, then the mean, sigma, and the gain a
single run must show to be kept at once under the default rule (2 sigma).

    .venv/bin/python benchmarks/noise.py [--track cpu] [--seeds 5] [--first-seed 42] [--cache DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--track", default="cpu")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=42)
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args()
    if args.cache is not None:
        os.environ["AUTORESEARCH_CACHE"] = str(args.cache.resolve())
    os.environ["AUTORESEARCH_TRACK"] = args.track

    from rich.console import Console
    from rich.table import Table

    from agent.runner import LocalRunner
    from agent.workspace import Workspace
    from trainer.track_builder import prepare_track

    spec = prepare_track(args.track, cache=args.cache, show_progress=False).spec
    workspace = Workspace.create("noise", spec, REPO / "prompts" / "program.md",
                                 root=Path(tempfile.mkdtemp(prefix="noise-bench-")))
    budget = spec["constants"]["time_budget"]
    table = Table(title=f"val_bpb by seed: {args.track} track, baseline train.py, {os.cpu_count()} cores")
    for column in ("seed", "val_bpb", "steps", "training s", "wall s"):
        table.add_column(column, justify="right")
    values = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        result = LocalRunner().run(workspace, workspace.head(), 2 * budget + 600, f"seed{seed}", seed)
        summary = result.summary
        if "val_bpb" not in summary:
            raise SystemExit(f"seed {seed} failed ({result.verdict.triage.value}): {result.verdict.reason}\n"
                             f"{result.tail}")
        values.append(float(summary["val_bpb"]))
        table.add_row(str(seed), summary["val_bpb"], summary.get("num_steps", "?"),
                      summary.get("training_seconds", "?"), f"{result.seconds:.1f}")
    sigma = statistics.stdev(values)
    table.add_section()
    table.add_row("mean", f"{statistics.fmean(values):.6f}", "", "", "")
    table.add_row("sigma", f"{sigma:.6f}", "", "", "")
    table.add_row("2 sigma", f"{2 * sigma:.6f}", "", "", "")
    Console().print(table)


if __name__ == "__main__":
    main()
