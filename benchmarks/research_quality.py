"""Does the loop do good research? Whole nights of each proposer over several seeds, measured afterwards.

Each night runs the real loop (run_loop, the local runner) in a fresh workspace on --track, with one of:
- random: one hyperparameter of the block set to a random value of Optuna's range (a control,
  tests/helpers/random_changes.py);
- optuna: the shipped TPE proposer;
- hybrid: the shipped hybrid, its LLM the scripted model of the tests (tests/helpers/llm_responders.py) behind
  the loopback server, submitting the same code changes in the same order every seed (CODE_CHANGES).
Seed i of a proposer sets the night's --seed and Optuna's sampler seed to --first-seed + SEED_STRIDE * i.
After each night (benchmarks/night_quality.py): gain over the baseline, keeps, keep rate, noise keeps (every keep
and its parent trained again with --recheck-seeds fresh seeds), holdout retention (those fresh runs of the baseline
and the best, scored on val and on holdout), experiments per hour. Optuna starts cold: no warm start. Prints a
table per night, a summary per proposer (mean ± sd over seeds) and whether the goals hold.

    .venv/bin/python benchmarks/research_quality.py [--proposers random,optuna,hybrid] [--seeds 3]
        [--experiments 15] [--track test] [--setting noise_seeds=3 ...] [--json PATH] [--cache DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PROPOSERS = ("random", "optuna", "hybrid")
SEED_STRIDE = 1000       # nights' seeds this far apart use no seed of another night (each run takes the next one)
MODEL = "anthropic:claude-opus-5-5"  # the SDK and wire format the scripted model answers


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposers", default=",".join(PROPOSERS), help="comma-separated: " + ", ".join(PROPOSERS))
    parser.add_argument("--seeds", type=int, default=3, help="nights per proposer")
    parser.add_argument("--first-seed", type=int, default=42)
    parser.add_argument("--experiments", type=int, default=15, help="experiments a night after its baseline")
    parser.add_argument("--track", default="test", help="test (seconds a run) or cpu (minutes a run)")
    parser.add_argument("--recheck-seeds", type=int, default=3, help="fresh runs of each keep and its parent")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="a loop setting for every night, by its name in agent/settings.py LoopSettings")
    parser.add_argument("--json", type=Path, default=None, help="write every night's numbers here")
    parser.add_argument("--cache", type=Path, default=None, help="track cache (default $AUTORESEARCH_CACHE)")
    parser.add_argument("--keep-workspaces", action="store_true", help="leave the nights' workspaces on disk")
    args = parser.parse_args(argv)
    args.proposers = [name.strip() for name in args.proposers.split(",") if name.strip()]
    if unknown := [name for name in args.proposers if name not in PROPOSERS]:
        parser.error(f"--proposers: unknown {', '.join(unknown)}; choose from {', '.join(PROPOSERS)}")
    for name, value in (("--seeds", args.seeds), ("--experiments", args.experiments),
                        ("--recheck-seeds", args.recheck_seeds)):
        if value < 1:
            parser.error(f"{name} must be at least 1, got {value}")
    try:
        args.settings = loop_settings(args.setting)
    except ValueError as err:
        parser.error(str(err))
    return args


def loop_settings(pairs: list[str]) -> dict[str, str]:
    """--setting NAME=VALUE pairs, checked against LoopSettings (raises ValueError saying what is wrong)."""
    from pydantic import ValidationError

    from agent.settings import LoopSettings
    given = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name.strip():
            raise ValueError(f"--setting {pair!r}: write NAME=VALUE, e.g. --setting noise_seeds=3")
        given[name.strip()] = value.strip()
    for owned in ("max_experiments", "seed"):
        if owned in given:
            raise ValueError(f"--setting {owned}: the benchmark sets it (use --experiments / --first-seed)")
    try:
        LoopSettings(**given)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ValueError(f"--setting: {problems} (the names are LoopSettings' fields in agent/settings.py)") from None
    return given


@contextlib.contextmanager
def scripted_model() -> Iterator[None]:
    """The scripted LLM behind the loopback server, where the Anthropic SDK looks for its service."""
    from tests.helpers.llm_responders import CodeChanges
    from tests.helpers.llm_server import LLMServer
    wanted = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
    saved = {name: os.environ.get(name) for name in wanted}
    with LLMServer(responder=CodeChanges()) as server:
        os.environ.update(ANTHROPIC_API_KEY="benchmark", ANTHROPIC_BASE_URL=server.anthropic_base_url())
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@contextlib.contextmanager
def night_proposer(name: str, workspace, seed: int) -> Iterator[object]:
    from agent.proposers.optuna_search import OptunaProposer
    from tests.helpers.random_changes import RandomChanges
    if name == "random":
        yield RandomChanges(seed)
        return
    # no warm start: its hand-picked first trials would credit the proposer with what a person already knew
    optuna = OptunaProposer(workspace.dir / "optuna.journal", seed=seed, warm_start=[])
    if name == "optuna":
        yield optuna
        return
    from agent.llm.pricing import PriceTable
    from agent.llm.select import conversation_factory
    from agent.proposers.hybrid import HybridProposer
    from agent.proposers.llm import LLMProposer
    with scripted_model():
        llm = LLMProposer(conversation_factory(MODEL), workspace.dir, PriceTable(), retry_base_s=0.01,
                          outage_window_s=30)
        yield HybridProposer(llm, optuna)


def run_night(name: str, seed: int, args: argparse.Namespace, spec: dict, root: Path):
    """One night of a proposer, then its measurement (benchmarks/night_quality.py)."""
    from agent.loop import run_loop
    from agent.running.runner import LocalRunner
    from agent.settings import LoopSettings
    from agent.workspace import Workspace
    from benchmarks.night_quality import measure_night

    settings = LoopSettings(**{**args.settings, "max_experiments": args.experiments + 1, "seed": seed})
    workspace = Workspace.create(f"{name}-{seed}", spec, REPO / "prompts" / "program.md", root=root)
    runner = LocalRunner()
    with night_proposer(name, workspace, seed) as proposer:
        started = time.monotonic()
        stopped = run_loop(workspace, proposer, runner, settings,
                           say=lambda line: print(f"  {name} seed {seed}: {line}", flush=True))
        night_s = time.monotonic() - started
    print(f"  {name} seed {seed}: {stopped} in {night_s:.0f} s; re-checking its keeps", flush=True)
    return measure_night(workspace, runner, settings, name, seed, stopped, night_s, args.recheck_seeds)


def night_table(night):
    from rich.table import Table
    from rich.text import Text
    rate = f"{night.keep_rate:.0%}" if night.keep_rate is not None else "-"
    retention = f"{night.retention:.0%}" if night.retention is not None else "- (no gain)"
    table = Table(title=f"{night.proposer}, seed {night.seed}: its keeps trained again",
                  caption=Text(f"gain {night.gain:+.5f} (holdout {night.holdout_gain:+.5f}, retention {retention}); "
                          f"{night.keeps} keep(s) of {night.experiments} ({rate}), {night.noise_keeps} noise "
                          f"keep(s); {night.experiments_per_hour:.0f} experiments/h ({night.night_s:.0f} s night, "
                          f"{night.check_s:.0f} s re-check); {night.stopped}"))
    for column in ("keep", "parent", "change", "gain kept on", "fresh mean", "parent mean (runs)", "fresh gain",
                   "noise keep"):
        table.add_column(column, justify="left" if column == "change" else "right")
    for check in night.checks:
        decided = f"{check.decided_gain:+.5f}" if check.decided_gain is not None else "-"
        table.add_row(check.keep, check.parent, Text(check.description), decided,
                      f"{sum(check.fresh) / len(check.fresh):.5f}",
                      f"{sum(check.parent_runs) / len(check.parent_runs):.5f} ({len(check.parent_runs)})",
                      f"{check.gain:+.5f}", "yes" if check.noise else "no")
    return table


def summary_table(nights, track: str, experiments: int):
    from rich.table import Table

    from benchmarks.quality_summary import summarize
    table = Table(title=f"research quality by proposer: {track} track, {experiments} experiments a night, "
                        f"{os.cpu_count()} cores (mean ± sd over seeds)")
    for column in ("proposer", "nights", "gain", "keeps", "keep rate", "noise keeps", "holdout retention",
                   "experiments/h", "night s"):
        table.add_column(column, justify="right")
    for s in summarize(nights):
        table.add_row(s.proposer, str(s.nights), s.gain.show("+.5f"), s.keeps.show(".1f"),
                      s.keep_rate.show(".0%") if s.keep_rate else "-", s.noise_keeps.show(".1f"),
                      s.retention.show(".0%") if s.retention else "-", s.experiments_per_hour.show(".0f"),
                      s.night_s.show(".0f"))
    return table


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(argv)
    if args.cache is not None:
        os.environ["AUTORESEARCH_CACHE"] = str(args.cache.resolve())
    os.environ["AUTORESEARCH_TRACK"] = args.track
    from rich.console import Console

    from agent.judging.confirm import ConfirmError
    from agent.loop import LoopStopped
    from benchmarks.night_quality import NightFailed
    from benchmarks.quality_summary import goals, verdict
    from trainer.tracks.builder import prepare_track

    console = Console(width=160)
    spec = prepare_track(args.track, cache=args.cache, show_progress=False).spec
    root = Path(tempfile.mkdtemp(prefix="research-quality-"))
    console.print(f"{len(args.proposers)} proposer(s) x {args.seeds} seed(s), {args.experiments} experiments a "
                  f"night on the {args.track} track; workspaces in {root}")
    nights, failed = [], []
    started = time.monotonic()
    try:
        for name in args.proposers:
            for number in range(args.seeds):
                seed = args.first_seed + SEED_STRIDE * number
                try:
                    night = run_night(name, seed, args, spec, root)
                except (NightFailed, ConfirmError, LoopStopped) as err:
                    console.print(f"{name} seed {seed} could not be measured: {err}", markup=False)
                    failed.append(f"{name} seed {seed}: {err}")
                    continue
                nights.append(night)
                console.print(night_table(night))
    finally:
        if not args.keep_workspaces:
            shutil.rmtree(root, ignore_errors=True)
    if nights:
        console.print(summary_table(nights, args.track, args.experiments))
    console.print(verdict(goals(nights, len(failed))), markup=False)
    console.print(f"{len(nights)} night(s) measured in {time.monotonic() - started:.0f} s", markup=False)
    if args.json is not None:
        import json
        args.json.write_text(json.dumps({"track": args.track, "experiments": args.experiments,
                                         "nights": [night.model_dump() for night in nights], "failed": failed},
                                        indent=2))


if __name__ == "__main__":
    main()
