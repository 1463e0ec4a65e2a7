"""The `autoresearch` command line."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent.untrusted import bounded, shown
from trainer.prepare import TRACKS, PrepareError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="An LLM agent that does ML research overnight on a GPT training script.")
console = Console(soft_wrap=True, highlight=False)
PROJECT = Path(__file__).resolve().parent.parent
DEFAULT_PROGRAM = PROJECT / "prompts" / "program.md"

TrackOption = Annotated[str, typer.Option(help=f"Track: {', '.join(TRACKS)}.")]
CacheOption = Annotated[Path | None, typer.Option(
    help="Cache directory (default $AUTORESEARCH_CACHE or ~/.cache/autoresearch).")]
TAG_HELP = "Run tag: the workspace is workspace/<tag>, branch autoresearch/<tag>."


def checked_tag(tag: str | list[str]) -> str | list[str]:
    """A tag is a directory name under the workspace root and part of a git branch name: it must be both."""
    for one in [tag] if isinstance(tag, str) else tag:
        problem = tag_problem(one)
        if problem:
            raise typer.BadParameter(f"{shown_repr(one)} {problem}; use letters, digits, '.', '_' or '-', "
                                     "e.g. --tag dec3-lr-sweep")
    return tag


def tag_problem(tag: str) -> str | None:
    import git
    if not tag or len(tag) > 64:
        return "must be 1 to 64 characters long"
    if "/" in tag or "\\" in tag or tag in (".", ".."):
        return "names a path, not a single workspace directory"
    if tag.startswith("-"):
        return "starts with '-'"
    try:
        git.Git().check_ref_format(f"refs/heads/autoresearch/{tag}")
    except git.GitCommandError:
        return "is not a valid git branch name (see `git check-ref-format`: no '..', no trailing '.' or '.lock', " \
               "no control characters, spaces or any of ~^:?*[@{)"
    return None


def shown_repr(text: str) -> str:
    from agent.untrusted import bounded
    return repr(bounded(text, 80))


TagOption = Annotated[str, typer.Option(help=TAG_HELP, callback=checked_tag)]
WorkspacesOption = Annotated[Path | None, typer.Option(
    help="Where workspaces live (default $AUTORESEARCH_WORKSPACES or ./workspace).")]
ProgramOption = Annotated[Path, typer.Option(help="The research program (a markdown prompt).")]


def fail(message: str) -> None:
    console.print(Text("error: ", style="red") + shown(message, 4000))
    raise typer.Exit(2)


def say(message: str) -> None:
    """Prints a line that may carry a description, a reason or a path: never as markup."""
    console.print(shown(message, 4000))


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
    min_delta: Annotated[float, typer.Option(help="A keep must also gain more than this.")] = 0.0,
    seed: Annotated[int, typer.Option(help="The baseline's seed; each later run gets one not used before.")] = 42,
    noise_seeds: Annotated[int, typer.Option(
        help="Re-runs of the best that measure sigma of val_bpb (0: no noise floor, plain comparison).")] = 2,
    noise_every: Annotated[int, typer.Option(help="Measure the noise floor again after this many keeps.")] = 5,
    keep_sigmas: Annotated[float, typer.Option(
        help="Keep when the gain exceeds this many sigma; smaller gains are re-run and judged on the mean.")] = 2.0,
    grace_seconds: Annotated[float, typer.Option(help="Hard timeout = 2 x budget + this.")] = 120.0,
    max_cost_usd: Annotated[float | None, typer.Option(
        help="Stop once the LLM spend of the tag reaches this.")] = None,
    max_tool_calls: Annotated[int, typer.Option(help="Tool calls an LLM may make per proposal.")] = 20,
    thinking_budget: Annotated[int, typer.Option(
        help="Thinking tokens for Anthropic models that only take a budget (4.5 and older).")] = 4000,
    effort: Annotated[str | None, typer.Option(
        help="Reasoning effort: low, medium, high, xhigh, max (Anthropic adaptive thinking; OpenAI also none, "
             "minimal). Default: the model's own.")] = None,
    pricing: Annotated[Path | None, typer.Option(
        help='JSON prices, USD per million tokens, e.g. {"my-model": {"input": 3, "output": 15, '
             '"cache_read": 0.3}}; extends and overrides the model table.')] = None,
    hybrid_share: Annotated[float, typer.Option(help="Share of hybrid experiments proposed by Optuna.")] = 0.3,
    outage_minutes: Annotated[float, typer.Option(help="Retry a silent LLM provider this long, then pause.")] = 30.0,
    overlap: Annotated[bool, typer.Option(help="Propose the next experiment while the current one trains.")] = True,
    runner: Annotated[str, typer.Option(help="local (a subprocess here) or spool (trainer workers).")] = "local",
    spool: Annotated[Path | None, typer.Option(help="The spool directory shared with trainer workers.")] = None,
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
    if runner not in ("local", "spool") or (runner == "spool") != (spool is not None):
        fail("use --runner local, or --runner spool --spool DIR")
    try:
        workspace = Workspace.open(tag, workspaces)
    except WorkspaceError:
        workspace = _create(tag, track, program or DEFAULT_PROGRAM, workspaces, cache)
        console.print(f"created {workspace.dir} (track {track})")
    if program is not None:
        _set_program(workspace, program)
    chosen = _make_proposer(proposer, workspace, model, base_url, max_tool_calls, thinking_budget, pricing,
                            hybrid_share, outage_minutes, effort=effort, max_cost_usd=max_cost_usd)
    settings = LoopSettings(max_experiments=max_experiments, max_hours=max_hours, min_delta=min_delta,
                            grace_seconds=grace_seconds, max_cost_usd=max_cost_usd, overlap=overlap, seed=seed,
                            noise_seeds=noise_seeds, noise_every_keeps=noise_every, keep_sigmas=keep_sigmas)
    console.print(f"research loop on {workspace.dir} (track {workspace.settings['track']}, proposer {chosen.name}"
                  + (f", model {model}" if model else "") + ")")
    # SIGTERM (`docker compose stop`, systemd, kill) stops the loop the way Ctrl-C does.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if spool is not None:
            from agent.spool_runner import SpoolRunner
            trainer = SpoolRunner(spool)
        else:
            trainer = LocalRunner()
        why = run_loop(workspace, chosen, trainer, settings, say=say)
    except KeyboardInterrupt:
        why = "stopped by Ctrl-C; the running experiment was recorded as interrupted"
    except (LoopStopped, WorkspaceError) as err:
        _where(workspace)
        fail(str(err))
    say(f"stopped: {why}")
    if not why.startswith("stopped by Ctrl-C"):
        _confirm(workspace, trainer)
    _where(workspace)


@app.command()
def confirm(tag: TagOption = "demo", workspaces: WorkspacesOption = None, cache: CacheOption = None,
            spool: Annotated[Path | None, typer.Option(help="Evaluate on the trainer workers of this spool.")] = None,
            ) -> None:
    """Score the baseline's and the best's saved weights on val and on the holdout split no decision read."""
    from agent.runner import LocalRunner
    from agent.workspace import Workspace, WorkspaceError
    if cache is not None:
        import os
        os.environ["AUTORESEARCH_CACHE"] = str(cache.expanduser().resolve())
    try:
        workspace = Workspace.open(tag, workspaces)
    except WorkspaceError as err:
        fail(str(err))
    if spool is not None:
        from agent.spool_runner import SpoolRunner
        trainer = SpoolRunner(spool)
    else:
        trainer = LocalRunner()
    if not _confirm(workspace, trainer):
        raise typer.Exit(1)


def _confirm(workspace, trainer) -> bool:
    from agent.confirm import ConfirmError, confirm
    try:
        out = confirm(workspace, trainer)
    except ConfirmError as err:
        console.print(f"holdout confirmation: {err}")
        return False
    base, best = out["baseline"], out["best"]
    console.print(f"holdout confirmation: baseline {base['id']} holdout {base['holdout']:.6f}, best {best['id']} "
                  f"holdout {best['holdout']:.6f}: gain {out['holdout_gain']:+.6f} on holdout vs "
                  f"{out['search_gain']:+.6f} on the searched val split ({workspace.dir / 'confirmation.json'})")
    return True


def _make_proposer(kind: str, workspace, model: str | None, base_url: str | None, max_tool_calls: int,
                   thinking_budget: int, pricing: Path | None, hybrid_share: float, outage_minutes: float, *,
                   effort: str | None = None, max_cost_usd: float | None = None):
    from agent.proposers.optuna_search import OptunaProposer
    optuna = OptunaProposer(workspace.dir / "optuna.journal")
    if kind == "optuna":
        return optuna
    from agent.llm.pricing import PriceTable
    from agent.llm.select import conversation_factory, parse_model, unknown_model_warning
    from agent.llm.types import ProviderFatal
    from agent.proposers.hybrid import HybridProposer
    from agent.proposers.llm import LLMProposer
    if model is None:
        fail(f"--proposer {kind} needs --model PROVIDER:MODEL (e.g. anthropic:claude-opus-4-8)")
    try:
        factory = conversation_factory(model, base_url, thinking_budget, effort=effort, cache_key=workspace.tag)
        prices = PriceTable(pricing)
        name = parse_model(model)[1].name
    except (ProviderFatal, OSError, ValueError) as err:
        fail(str(err))
    warning = unknown_model_warning(model)
    if warning:
        console.print(f"[yellow]{warning}[/yellow]")
    if max_cost_usd is not None and prices.price(name) is None:
        fail(f"--max-cost-usd cannot be enforced: {model} has no price. Give one with --pricing FILE, e.g. "
             f'{{"{name}": {{"input": 3.0, "output": 15.0, "cache_read": 0.3}}}} (USD per million tokens)')
    llm = LLMProposer(factory, workspace.dir, prices, max_tool_calls=max_tool_calls,
                      outage_window_s=outage_minutes * 60)
    return llm if kind == "llm" else HybridProposer(llm, optuna, hybrid_share)


@app.command()
def steer(tag: TagOption, program: Annotated[Path | None, typer.Argument(
              help="The research program to switch to.")] = None,
          note: Annotated[str | None, typer.Option(help="A note to add to the research notes (notes.md), which "
                                                        "every later proposal sees.")] = None,
          workspaces: WorkspacesOption = None) -> None:
    """Swap the research program of a tag, or add a note for the researcher, running or not: the next
    experiment is proposed under it."""
    from agent.notes import NotesFull, append_user_note
    from agent.workspace import Workspace, WorkspaceError
    if program is None and note is None:
        fail("give a research program to switch to, a --note to add, or both")
    try:
        workspace = Workspace.open(tag, workspaces)
    except WorkspaceError as err:
        fail(str(err))
    if program is not None:
        _set_program(workspace, program)
        console.print(f"{tag} now follows {program.resolve()} from its next experiment on")
    if note is not None:
        try:
            notes = append_user_note(workspace.dir, note)
        except NotesFull as err:
            fail(str(err))
        console.print(f"added to {tag}'s notes ({notes.size} bytes now); the next proposal sees it")


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
    named = {p.stem: p for p in paths}
    if experiment is not None and experiment not in named:
        fail(f"no transcript for experiment {shown_repr(experiment)}: there are {', '.join(named)}")
    path = named[experiment] if experiment is not None else paths[-1]
    console.print(render(Transcript(path).events(), path.stem))


@app.command()
def status(tag: TagOption = "demo", workspaces: WorkspacesOption = None,
           watch: Annotated[bool, typer.Option(help="Refresh until Ctrl-C.")] = False,
           interval: Annotated[float, typer.Option(help="Seconds between refreshes with --watch.")] = 5.0) -> None:
    """Best so far, counts, keep rate, cost, and the experiment running now."""
    from agent.workspace import Workspace, WorkspaceError
    try:
        workspace = Workspace.open(tag, workspaces)
    except WorkspaceError as err:
        fail(str(err))
    if not watch:
        console.print(_status_view(workspace))
        return
    from rich.live import Live
    try:
        with Live(_status_view(workspace), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(interval)
                live.update(_status_view(workspace))
    except KeyboardInterrupt:
        pass


def _status_view(workspace):
    from rich.console import Group
    from rich.text import Text

    from agent.ledger import read_ledger
    from agent.proposal_failures import read_failures
    from agent.report.summary import headline, parse_time
    from trainer.atomic import read_json
    records, bad = read_ledger(workspace.dir)
    lines: list = [shown(line.describe(workspace.dir / "experiments.jsonl", moved=False), style="yellow")
                   for line in bad]
    if not records:
        lines.append(Text(f"{workspace.tag}: no experiments yet"))
    else:
        h = headline(records)
        lines.append(Text.from_markup(
            f"[bold]{workspace.tag}[/bold]: track {workspace.settings['track']}, {h.experiments} experiments, "
            f"{h.keeps} kept, keep rate {h.keep_rate:.0%}, {h.hours:.2f} h, duty cycle {h.duty_cycle:.0%}"))
        best = next(r for r in reversed(records) if r["status"] == "keep") if h.best is not None else None
        if best:
            lines.append(shown(f"best val_bpb {h.best:.6f} ({best['commit'][:7]}, {bounded(best['description'])}); "
                               f"baseline {h.baseline:.6f}, {h.gain_percent:.2f}% better"))
        floors = [r for r in records if r["status"] == "noise"]
        if floors:
            floor = floors[-1]
            measured = f"sigma {floor['sigma']:.6f}" if floor.get("sigma") is not None else "sigma not measured"
            lines.append(Text(f"noise: {measured} from {len(floor['values'])} runs of {floor['of']} (val_bpb "
                              + ", ".join(f"{v:.6f}" for v in floor["values"])
                              + f"); {h.confirmed} keep(s) confirmed by a re-run"))
        if h.crash_rates:
            lines.append(Text("crashes: " + ", ".join(f"{k} {v:.0%}" for k, v in h.crash_rates.items())))
        if h.tokens:
            lines.append(Text(f"LLM: {h.tokens:,} tokens, ${h.cost_usd:.2f} so far"))
    failed = read_failures(workspace.dir)
    if failed:
        spent = sum(float(f.usage.get("cost_usd", 0.0)) for f in failed)
        lines.append(Text(f"proposals without an experiment: {len(failed)} (${spent:.2f}); last: {failed[-1].kind} "
                          f"for {failed[-1].experiment_id}: {failed[-1].reason[:200]}"))
    current = read_json(workspace.dir / "current.json")
    if current:
        elapsed = time.time() - parse_time(current["started"])
        budget = workspace.track["constants"]["time_budget"]
        left = f"{budget - elapsed:.0f} s of the {budget} s budget left" if elapsed < budget else \
            f"past the {budget} s budget (startup, compile and eval come on top)"
        lines.append(shown(f"running: {current.get('id')} {bounded(current.get('description', ''))} "
                           f"({elapsed:.0f} s, {left})"))
    if records:
        from agent.research_memory import kept_as, lessons_by_id, reasoning
        lessons = lessons_by_id(records)
        table = Table("id", "status", "val_bpb", "triage", "description, hypothesis and lesson",
                      title="last experiments")
        for r in records[-10:]:
            why = reasoning(r, lessons, 200)
            said = "".join(f"\n{label}: {text}" for label, text in (("hypothesis", why.hypothesis),
                                                                     ("expected", why.expected),
                                                                     ("lesson", why.lesson)) if text)
            table.add_row(shown(r["id"], 20), kept_as(r), f"{r['val_bpb']:.6f}" if r.get("val_bpb") else "-",
                          shown(str(r.get("triage", "")), 20), shown(bounded(r["description"], 200) + said))
        lines.append(table)
    return Group(*lines)


@app.command()
def report(tag: Annotated[list[str], typer.Option(help="Tag to report on; repeat it to compare runs.",
                                                  callback=checked_tag)],
           workspaces: WorkspacesOption = None) -> None:
    """Write workspace/<tag>/report/index.html (self-contained) and progress.png; several tags are compared."""
    from agent.report.build import write_comparison, write_report
    from agent.workspace import Workspace, WorkspaceError, default_root
    try:
        opened = [Workspace.open(t, workspaces) for t in tag]
    except WorkspaceError as err:
        fail(str(err))
    for workspace in opened:
        console.print(f"{workspace.tag}: {write_report(workspace)}")
    if len(opened) > 1:
        destination = (workspaces or default_root()) / ("compare-" + "-".join(tag))
        console.print(f"compared: {write_comparison(opened, destination)}")


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

    from trainer.atomic import write_text_atomic
    if not program.is_file():
        fail(f"research program {program} does not exist: pass a path to a markdown file")
    settings = dict(workspace.settings, program=str(program.resolve()))
    write_text_atomic(workspace.dir / "run.json", json.dumps(settings, indent=2) + "\n")


def _where(workspace) -> None:
    console.print(f"results: {workspace.dir / 'results.tsv'} and {workspace.dir / 'experiments.jsonl'}; "
                  f"transcripts: {workspace.dir / 'transcripts'}; logs: {workspace.dir / 'logs'}")


if __name__ == "__main__":
    app()
