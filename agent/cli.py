"""The `autoresearch` command line."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from trainer.prepare import TRACKS, PrepareError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="An LLM agent that does ML research overnight on a GPT training script.")
console = Console(soft_wrap=True, highlight=False)
PROJECT = Path(__file__).resolve().parent.parent
DEFAULT_PROGRAM = PROJECT / "prompts" / "program.md"

TrackOption = Annotated[str, typer.Option(help=f"Track: {', '.join(TRACKS)}.")]
CacheOption = Annotated[Path | None, typer.Option(
    help="Cache directory (default $AUTORESEARCH_CACHE or ~/.cache/autoresearch).")]
TagOption = Annotated[str, typer.Option(help="Run tag: the workspace is workspace/<tag>, branch autoresearch/<tag>.")]
WorkspacesOption = Annotated[Path | None, typer.Option(
    help="Where workspaces live (default $AUTORESEARCH_WORKSPACES or ./workspace).")]
ProgramOption = Annotated[Path, typer.Option(help="The research program (a markdown prompt).")]


def fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(2)


@app.command()
def prepare(
    track: TrackOption = "cpu",
    source: Annotated[str | None, typer.Option(
        help="climbmix, stdlib, or a folder of .txt/.jsonl/.parquet (default: the track's own source).")] = None,
    num_shards: Annotated[int | None, typer.Option(
        help="Training shards to download with --source climbmix (default 10).")] = None,
    cache: CacheOption = None,
) -> None:
    """Build a track's data splits and tokenizer (skipped when already prepared from the same source)."""
    console.print(_describe(_prepare(track, source, num_shards, cache)))


@app.command()
def init(tag: TagOption, track: TrackOption = "cpu", program: ProgramOption = DEFAULT_PROGRAM,
         workspaces: WorkspacesOption = None, cache: CacheOption = None) -> None:
    """Create workspace/<tag>: its own git repository with train.py for the track, prepare.py and track.json."""
    workspace = _create(tag, track, program, workspaces, cache)
    console.print(f"created {workspace.dir} on branch {workspace.branch} (track {track}); "
                  f"start it with `autoresearch run --tag {tag}`")


@app.command()
def run(
    tag: TagOption = "demo",
    track: Annotated[str, typer.Option(help="Track for a new tag (an existing tag keeps its own).")] = "cpu",
    max_experiments: Annotated[int | None, typer.Option(help="Experiments to run now (the baseline counts).")] = None,
    max_hours: Annotated[float | None, typer.Option(help="Start no experiment after this many hours.")] = None,
    proposer: Annotated[str, typer.Option(help="optuna (offline), llm, or hybrid (Optuna on a share).")] = "optuna",
    model: Annotated[str | None, typer.Option(
        help="PROVIDER:MODEL for llm/hybrid: anthropic:..., openai:..., openai-compatible:NAME.")] = None,
    base_url: Annotated[str | None, typer.Option(help="Server URL (openai-compatible, or a proxy).")] = None,
    program: Annotated[Path | None, typer.Option(help="The research program (default: the tag's).")] = None,
    min_delta: Annotated[float, typer.Option(help="Keep only if val_bpb < best - MIN_DELTA.")] = 0.0,
    grace_seconds: Annotated[float, typer.Option(help="Hard timeout = 2 x budget + this.")] = 120.0,
    max_cost_usd: Annotated[float | None, typer.Option(
        help="Stop once the LLM spend of the tag reaches this.")] = None,
    max_tool_calls: Annotated[int, typer.Option(help="Tool calls an LLM may make per proposal.")] = 20,
    thinking_budget: Annotated[int, typer.Option(help="Extended-thinking tokens (Anthropic models with it).")] = 4000,
    pricing: Annotated[Path | None, typer.Option(
        help="JSON price table (USD per Mtok) to extend the built-in.")] = None,
    hybrid_share: Annotated[float, typer.Option(help="Share of hybrid experiments proposed by Optuna.")] = 0.3,
    outage_minutes: Annotated[float, typer.Option(help="Retry a silent LLM provider this long, then pause.")] = 30.0,
    workspaces: WorkspacesOption = None,
    cache: CacheOption = None,
) -> None:
    """Run the research loop on a tag (created if new, resumed if it exists). Ctrl-C stops cleanly."""
    from agent.loop import LoopSettings, LoopStopped, run_loop
    from agent.runner import LocalRunner
    from agent.workspace import Workspace, WorkspaceError

    if cache is not None:
        import os
        os.environ["AUTORESEARCH_CACHE"] = str(cache.expanduser().resolve())
    if proposer not in ("optuna", "llm", "hybrid"):
        fail(f"unknown proposer {proposer!r}: use optuna, llm or hybrid")
    try:
        workspace = Workspace.open(tag, workspaces)
    except WorkspaceError:
        workspace = _create(tag, track, program or DEFAULT_PROGRAM, workspaces, cache)
        console.print(f"created {workspace.dir} (track {track})")
    if program is not None:
        _set_program(workspace, program)
    chosen = _make_proposer(proposer, workspace, model, base_url, max_tool_calls, thinking_budget, pricing,
                            hybrid_share, outage_minutes)
    settings = LoopSettings(max_experiments=max_experiments, max_hours=max_hours, min_delta=min_delta,
                            grace_seconds=grace_seconds, max_cost_usd=max_cost_usd)
    console.print(f"research loop on {workspace.dir} (track {workspace.settings['track']}, proposer {chosen.name}"
                  + (f", model {model}" if model else "") + ")")
    try:
        why = run_loop(workspace, chosen, LocalRunner(), settings, say=console.print)
    except KeyboardInterrupt:
        why = "stopped by Ctrl-C; the running experiment was recorded as interrupted"
    except (LoopStopped, WorkspaceError) as err:
        _where(workspace)
        fail(str(err))
    console.print(f"stopped: {why}")
    _where(workspace)


def _make_proposer(kind: str, workspace, model: str | None, base_url: str | None, max_tool_calls: int,
                   thinking_budget: int, pricing: Path | None, hybrid_share: float, outage_minutes: float):
    from agent.proposers.optuna_search import OptunaProposer
    optuna = OptunaProposer(workspace.dir / "optuna.journal")
    if kind == "optuna":
        return optuna
    from agent.llm.pricing import PriceTable
    from agent.llm.select import conversation_factory
    from agent.llm.types import ProviderFatal
    from agent.proposers.hybrid import HybridProposer
    from agent.proposers.llm import LLMProposer
    if model is None:
        fail(f"--proposer {kind} needs --model PROVIDER:MODEL (e.g. anthropic:claude-sonnet-4-5)")
    try:
        factory = conversation_factory(model, base_url, thinking_budget)
        prices = PriceTable(pricing)
    except (ProviderFatal, OSError, ValueError) as err:
        fail(str(err))
    llm = LLMProposer(factory, workspace.dir, prices, max_tool_calls=max_tool_calls,
                      outage_window_s=outage_minutes * 60)
    return llm if kind == "llm" else HybridProposer(llm, optuna, hybrid_share)


@app.command()
def steer(tag: TagOption, program: Annotated[Path, typer.Argument(help="The research program to switch to.")],
          workspaces: WorkspacesOption = None) -> None:
    """Swap the research program of a tag, running or not: the next experiment is proposed under it."""
    from agent.workspace import Workspace, WorkspaceError
    try:
        workspace = Workspace.open(tag, workspaces)
    except WorkspaceError as err:
        fail(str(err))
    _set_program(workspace, program)
    console.print(f"{tag} now follows {program.resolve()} from its next experiment on")


@app.command()
def transcript(tag: TagOption = "demo", experiment: Annotated[str | None, typer.Argument(
        help="Experiment id (default: the latest).")] = None, workspaces: WorkspacesOption = None) -> None:
    """Print one experiment's transcript readably."""
    from agent.transcript import Transcript
    from agent.transcript_view import render
    from agent.workspace import Workspace, WorkspaceError
    try:
        workspace = Workspace.open(tag, workspaces)
    except WorkspaceError as err:
        fail(str(err))
    paths = sorted((workspace.dir / "transcripts").glob("*.jsonl"))
    if not paths:
        fail(f"{tag} has no transcripts yet")
    path = workspace.dir / "transcripts" / f"{experiment}.jsonl" if experiment else paths[-1]
    if not path.exists():
        fail(f"no transcript for experiment {experiment!r}: there are {', '.join(p.stem for p in paths)}")
    console.print(render(Transcript(path).events(), path.stem))


@app.command()
def status(tag: TagOption = "demo", workspaces: WorkspacesOption = None) -> None:
    """Best so far, counts, keep rate, and the experiment running now."""
    from agent.ledger import Ledger
    from agent.workspace import Workspace, WorkspaceError
    try:
        workspace = Workspace.open(tag, workspaces)
    except WorkspaceError as err:
        fail(str(err))
    ledger = Ledger(workspace.dir)
    records, best, current = ledger.records, ledger.best(), ledger.in_flight()
    decided = [r for r in records if r["status"] in ("keep", "discard", "crash")]
    keeps = sum(r["status"] == "keep" for r in records)
    console.print(f"[bold]{tag}[/bold]: track {workspace.settings['track']}, {len(records)} experiments, "
                  f"{keeps} kept, keep rate {keeps / len(decided):.0%}" if decided else f"{tag}: no experiments yet")
    if best:
        baseline = records[0]["val_bpb"]
        console.print(f"best val_bpb {best['val_bpb']:.6f} ({best['commit'][:7]}, {best['description']}); "
                      f"baseline {baseline:.6f}, {100 * (baseline - best['val_bpb']) / baseline:.2f}% better")
    crashes: dict[str, int] = {}
    for r in records:
        if r["status"] in ("crash", "interrupted"):
            crashes[r["triage"]] = crashes.get(r["triage"], 0) + 1
    if crashes:
        console.print("crashes: " + ", ".join(f"{k} {v}" for k, v in sorted(crashes.items())))
    if records:
        first = time.mktime(time.strptime(records[0]["started"], "%Y-%m-%dT%H:%M:%S%z"))
        console.print(f"elapsed since the first experiment: {(time.time() - first) / 3600:.2f} h")
    if current:
        started = time.mktime(time.strptime(current["started"], "%Y-%m-%dT%H:%M:%S%z"))
        console.print(f"running: {current['id']} {current['description']} ({time.time() - started:.0f} s so far)")
    table = Table("id", "status", "val_bpb", "triage", "description", title="last experiments")
    for r in records[-10:]:
        table.add_row(r["id"], r["status"], f"{r['val_bpb']:.6f}" if r.get("val_bpb") else "-", r["triage"],
                      r["description"])
    if records:
        console.print(table)


def _prepare(track: str, source: str | None, num_shards: int | None, cache: Path | None):
    from trainer.preparation import prepare_track
    try:
        return prepare_track(track, source=source, num_shards=num_shards, cache=cache)
    except PrepareError as err:
        fail(str(err))


def _describe(prepared) -> str:
    from trainer.preparation import describe
    return describe(prepared)


def _create(tag: str, track: str, program: Path, workspaces: Path | None, cache: Path | None):
    from agent.workspace import Workspace, WorkspaceError
    if not program.is_file():
        fail(f"research program {program} does not exist: pass --program PATH to a markdown file")
    prepared = _prepare(track, None, None, cache)
    try:
        return Workspace.create(tag, prepared.spec, program.resolve(), workspaces)
    except WorkspaceError as err:
        fail(str(err))


def _set_program(workspace, program: Path) -> None:
    import json

    from agent.ledger import write_atomic
    if not program.is_file():
        fail(f"research program {program} does not exist: pass a path to a markdown file")
    settings = dict(workspace.settings, program=str(program.resolve()))
    write_atomic(workspace.dir / "run.json", json.dumps(settings, indent=2) + "\n")


def _where(workspace) -> None:
    console.print(f"results: {workspace.dir / 'results.tsv'} and {workspace.dir / 'experiments.jsonl'}; "
                  f"transcripts: {workspace.dir / 'transcripts'}; logs: {workspace.dir / 'logs'}")


if __name__ == "__main__":
    app()
