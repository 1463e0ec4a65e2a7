"""Run-to-run noise of val_bpb: one track's baseline train.py trained with several seeds.

Each run goes through the local runner exactly as an experiment would (fresh run directory,
AUTORESEARCH_SEED from the harness). Prints every run, then the mean, sigma, and the gain a
single run must show to be kept at once under the default rule (2 sigma).

With --hogs N every seed is trained twice, once as the machine is and once beside N processes that
spin on the CPU (started and stopped by pid around that run), so that both arms share whatever
else the machine is doing; it prints both arms and the ratio of their sigmas (loaded / as is).

    .venv/bin/python benchmarks/noise.py [--track cpu] [--seeds 5] [--first-seed 42] [--hogs 2] [--cache DIR] [--write]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--track", default="cpu")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=42)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--hogs", type=int, default=0, help="CPU-spinning processes beside the second arm")
    parser.add_argument("--write", action="store_true", help="store the measured sigma as the track's usual one")
    args = parser.parse_args()
    if args.cache is not None:
        os.environ["AUTORESEARCH_CACHE"] = str(args.cache.resolve())
    os.environ["AUTORESEARCH_TRACK"] = args.track

    from rich.console import Console
    from rich.table import Table

    from agent.running.runner import LocalRunner
    from agent.workspace import Workspace
    from trainer.runs.jobs import Job
    from trainer.runs.run_id import RunId
    from trainer.tracks.builder import prepare_track

    spec = prepare_track(args.track, cache=args.cache, show_progress=False).spec
    workspace = Workspace.create("noise", spec, REPO / "prompts" / "program.md",
                                 root=Path(tempfile.mkdtemp(prefix="noise-bench-")))
    budget = spec["constants"]["time_budget"]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    constants = spec["constants"]
    budget_kind = (f"{constants['flops_budget']:.3g} FLOPs" if constants.get("flops_budget") else
                   f"{constants['step_budget']} steps" if constants.get("step_budget") else
                   f"{budget} s, {constants.get('budget_clock', 'wall')} clock")
    arms = {"as is": 0, f"{args.hogs} hog(s)": args.hogs} if args.hogs else {"as is": 0}
    tables, values = {}, {arm: [] for arm in arms}
    for arm in arms:
        tables[arm] = Table(title=f"val_bpb by seed: {args.track} track ({budget_kind}), baseline train.py, "
                                  f"{os.cpu_count()} cores, {arm}")
        for column in ("seed", "val_bpb", "steps", "training s", "wall s"):
            tables[arm].add_column(column, justify="right")
    for seed in seeds:
        for arm, hogs in arms.items():
            spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
            try:
                asked = Job(run=RunId.train(f"seed{seed}-{hogs}"), commit=workspace.head(), seed=seed,
                            timeout=4 * budget + 600)
                result = LocalRunner().run(workspace, asked)
            finally:
                for hog in spinning:
                    hog.kill()
                    hog.wait()
            summary = result.summary
            if "val_bpb" not in summary:
                raise SystemExit(f"seed {seed} ({arm}) failed ({result.verdict.triage.value}): "
                                 f"{result.verdict.reason}\n{result.tail}")
            values[arm].append(float(summary["val_bpb"]))
            tables[arm].add_row(str(seed), summary["val_bpb"], summary.get("num_steps", "?"),
                                summary.get("training_seconds", "?"), f"{result.seconds:.1f}")
            print(f"seed {seed} {arm}: val_bpb {summary['val_bpb']} in {summary.get('num_steps')} steps, "
                  f"{result.seconds:.1f} s", flush=True)
    sigmas = {}
    for arm, table in tables.items():
        sigmas[arm] = statistics.stdev(values[arm])
        table.add_section()
        table.add_row("mean", f"{statistics.fmean(values[arm]):.6f}", "", "", "")
        table.add_row("sigma", f"{sigmas[arm]:.6f}", "", "", "")
        table.add_row("2 sigma", f"{2 * sigmas[arm]:.6f}", "", "", "")
        Console().print(table)
    if args.hogs:
        loaded, idle = sigmas[f"{args.hogs} hog(s)"], sigmas["as is"]
        print(f"sigma loaded / as is: {loaded:.6f} / {idle:.6f} = {loaded / idle:.2f}")
    if args.write:
        write_usual_sigma(args.track, sigmas["as is"], seeds)


def write_usual_sigma(track: str, sigma: float, seeds: list[int]) -> None:
    from agent.judging.usual_sigma import TABLE, UsualSigma, record_measurement
    from trainer.tracks.hardware import this_machine

    measured = UsualSigma(sigma=round(sigma, 6), seeds=seeds, date=time.strftime("%Y-%m-%d"),
                          machine=this_machine().describe(),
                          source=f"benchmarks/noise.py --track {track} --seeds {len(seeds)} --write")
    record_measurement(track, measured, TABLE)
    print(f"{TABLE.relative_to(REPO)}: {track} usual sigma {measured.describe()}")


if __name__ == "__main__":
    main()
