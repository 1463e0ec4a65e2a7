"""The `autoresearch` command line."""

from __future__ import annotations

import difflib
import inspect
import json
import os
import signal
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.text import Text

from agent.proposers.registry import proposers_help, unknown_proposer
from agent.running.registry import RunnerOptions, implied_runner
from agent.settings import RunSettings
from agent.untrusted import bounded, escape_controls, shown
from trainer.prepare import TRACKS, PrepareError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="An LLM agent that does ML research overnight on a GPT training script.")
console = Console(soft_wrap=True, highlight=False)
PROJECT = Path(__file__).resolve().parent.parent
DEFAULT_PROGRAM = PROJECT / "prompts" / "program.md"

TrackOption = Annotated[str | None, typer.Option(help=f"Track: {', '.join(TRACKS)} (default: gpu on a machine with "
                                                      "a CUDA GPU, else cpu).")]
CacheOption = Annotated[Path | None, typer.Option(help=RunSettings.model_fields["cache"].description)]
ProfileOption = Annotated[str | None, typer.Option(
    help="Hardware profile instead of this machine's (`autoresearch doctor` lists them).")]


def checked_tag(tag: str | list[str] | None) -> str | list[str] | None:
    """A tag is a directory name under the workspace root and part of a git branch name: it must be both."""
    from agent.workspace import tag_problem
    for one in [tag] if isinstance(tag, str) else tag or []:
        if problem := tag_problem(one):
            raise typer.BadParameter(f"{shown_repr(one)} {problem}; use letters, digits, '.', '_' or '-', "
                                     "e.g. --tag dec3-lr-sweep")
    return tag


def shown_repr(text: str) -> str:
    return repr(bounded(text, 80))


TagOption = Annotated[str, typer.Option(help=RunSettings.model_fields["tag"].description, callback=checked_tag)]
WorkspacesOption = Annotated[Path | None, typer.Option(help=RunSettings.model_fields["workspaces"].description)]
ProgramOption = Annotated[Path, typer.Option(help="The research program (a markdown prompt).")]


def fail(message: str) -> None:
    console.print(Text("error: ", style="red") + shown(message, 4000))
    raise typer.Exit(2)


def open_workspace(tag: str, workspaces: Path | None):
    from agent.workspace import Workspace, WorkspaceError
    try:
        return Workspace.open(tag, workspaces)
    except WorkspaceError as err:
        fail(str(err))


def say(message: str) -> None:
    """Prints a line that may carry a description, a reason or a path: never as markup."""
    console.print(shown(message, 4000))


def say_line(message: str) -> None:
    """say, with a line break inside a path or a name shown escaped: one line stays one line."""
    say(escape_controls(message, keep_newlines=False))


@app.command()
def prepare(
    track: TrackOption = None,
    source: Annotated[str | None, typer.Option(
        help="climbmix, stdlib, or a folder of .txt/.jsonl/.parquet (default: the track's own source).")] = None,
    num_shards: Annotated[int | None, typer.Option(
        help="Training shards to download with --source climbmix (default 10).")] = None,
    cache: CacheOption = None,
) -> None:
    """Build a track's data splits and tokenizer (skipped when already prepared from the same source)."""
    from trainer.tracks.builder import describe
    console.print(describe(_prepare(_new_track(track), source, num_shards, cache)))


@app.command()
def init(tag: TagOption, track: TrackOption = None, program: ProgramOption = DEFAULT_PROGRAM,
         workspaces: WorkspacesOption = None, cache: CacheOption = None, profile: ProfileOption = None) -> None:
    """Create workspace/<tag>: its own git repository with train.py for the track (set for this machine's
    hardware profile), prepare.py and track.json."""
    track = _new_track(track)
    workspace = _create(tag, track, program, workspaces, cache, profile)
    console.print(f"created {workspace.dir} on branch {workspace.branch} (track {track}); "
                  f"start it with `autoresearch run --tag {tag}`")


@app.command()
def doctor() -> None:
    """What this machine is, how runs are isolated on it, the profile each track would get here, and what a
    first night needs: keys, coding CLIs, prepared tracks, free disk, Docker."""
    from agent.doctor import answers
    from trainer.sandbox.untrusted import isolation
    from trainer.tracks.hardware import this_machine
    from trainer.tracks.profiles import KNOWN_DEVICES, ProfileError, profile_for
    hardware = this_machine()
    say(f"device: {hardware.describe()}")
    say(f"runs: {isolation().note}")
    for track in TRACKS:
        try:
            say(f"{track}: " + profile_for(track, hardware).describe())
        except ProfileError as err:
            say(f"{track}: no profile fits: {err}")
    say(f"profiles by name (--profile): {', '.join(KNOWN_DEVICES)}")
    for answer in answers():
        say(answer)


@app.command()
def calibrate(track: TrackOption = None, seeds: Annotated[int, typer.Option(
                  help="Runs of the baseline, seeds 42, 43, ...", min=1)] = 3,
              profile: ProfileOption = None, cache: CacheOption = None) -> None:
    """Train the track's unmodified baseline on this machine and record its val_bpb mean, sigma and tokens/s in
    the cache: reports show a night's best as the offset from it, and compare machines by their offsets."""
    from agent.recording.calibration import calibration_path, store_calibration
    from agent.running.runner import LocalRunner
    from agent.steps.calibration import CalibrationError
    from agent.steps.calibration import calibrate as calibrate_here
    from trainer.prepare import cache_root
    from trainer.tracks.hardware import this_machine
    from trainer.tracks.profiles import GPU_TRACKS
    _use_cache(cache)
    track = _new_track(track)
    if track in GPU_TRACKS and this_machine().backend == "cpu":
        fail(f"there is no GPU on this machine ({this_machine().name}): calibrate the {track} track on the machine "
             "its runs train on")
    chosen = _profile(track, profile)
    prepared = _prepare(track, None, None, cache)
    say(chosen.describe())
    try:
        calibration = calibrate_here(prepared.spec, chosen, [42 + n for n in range(seeds)], LocalRunner(), say)
    except CalibrationError as err:
        fail(f"calibration failed: {err}")
    path = calibration_path(cache_root(), track, calibration.hardware)
    store_calibration(path, calibration)
    say(f"calibrated baseline of {track}: {calibration.describe()}\nwritten to {path}")


def settings_command(model: type[BaseModel], extras: dict[str, dict]):
    """A command taking one settings object, offered as an option per field (help: the field's description;
    panel: the field's; extras: more typer.Option arguments by option name). A value the model refuses is a
    one-line error naming the option and its bound."""
    def decorate(function):
        parameters = []
        own = [name for name in model.model_fields if name in model.__annotations__]  # its own fields first
        for name in own + [name for name in model.model_fields if name not in own]:
            field = model.model_fields[name]
            extra = field.json_schema_extra or {}
            if extra.get("cli") is False:
                continue
            option = field.alias or name
            arguments = dict(help=field.description, rich_help_panel=extra.get("panel")) | extras.get(option, {})
            annotation = Annotated[field.annotation, typer.Option(**arguments)]
            parameters.append(inspect.Parameter(option, inspect.Parameter.KEYWORD_ONLY, default=field.default,
                                                annotation=annotation))

        def command(**options):
            try:
                settings = model.model_validate(options)
            except ValidationError as err:
                fail(refused_settings(err))
            return function(settings)
        command.__name__, command.__doc__ = function.__name__, function.__doc__
        command.__signature__ = inspect.Signature(parameters)
        command.__annotations__ = {p.name: p.annotation for p in parameters}
        return command
    return decorate


def refused_settings(err: ValidationError) -> str:
    """The settings model's refusals as one line: each option, the value given and the bound it broke."""
    said = []
    for problem in err.errors():
        message = problem["msg"].removeprefix("Value error, ")
        if problem["loc"]:
            option = "--" + str(problem["loc"][0]).replace("_", "-")
            message = f"{option} {shown_repr(str(problem['input']))}: {message[:1].lower()}{message[1:]}"
        said.append(message)
    return "; ".join(said)


@app.command()
@settings_command(RunSettings, {"tag": dict(callback=checked_tag), "proposer": dict(help=proposers_help())})
def run(settings: RunSettings) -> None:
    """Run the research loop on a tag (created if new, resumed if it exists). Every option is checked before
    anything is created or downloaded. Ctrl-C stops cleanly."""
    from agent.judging.keep_rule import KeepRule, store_keep_rule
    from agent.loop import LoopStopped, run_loop
    from agent.recording.gpu_cost import store_gpu_price
    from agent.workspace import WorkspaceError

    _use_cache(settings.cache)
    workspace, track = _checked_night(settings)
    build = _prepared_proposer(settings)
    trainer = _runner(RunnerOptions(parallel=settings.parallel, spool=settings.spool, ray_address=settings.ray_address))
    workspace = _night_workspace(settings, workspace, track)
    chosen = build(workspace)
    console.print(f"research loop on {workspace.dir} (track {track}, proposer {chosen.name}"
                  + (f", model {settings.model}" if settings.model else "") + ")")
    # SIGTERM (`docker compose stop`, systemd, kill) stops the loop the way Ctrl-C does.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    from agent.observe import ObservedProposer, ObservedRunner, ProgressObserver
    tracking = _start_tracking(settings.mlflow, workspace)
    notifier = _start_notifying(settings.notify, workspace)
    store_keep_rule(workspace, KeepRule.of(settings))  # the report states the rule of the latest night
    store_gpu_price(workspace, settings.gpu_usd_per_hour)  # and prices its GPU time at the latest night's price
    try:
        with ProgressObserver(workspace.dir, console) as observer:  # a live line per experiment in flight
            why = run_loop(workspace, ObservedProposer(chosen, observer, settings.model or chosen.name),
                           ObservedRunner(trainer, observer), settings, say=say)
    except KeyboardInterrupt:
        why = "stopped by Ctrl-C; the experiments in flight were recorded as interrupted"
    except (LoopStopped, WorkspaceError) as err:
        _where(workspace)
        _report_anyway(workspace)
        _notify_stopped(notifier, str(err))
        fail(str(err))
    except Exception as err:  # a failure of the loop itself: said, then raised as it was
        _report_anyway(workspace)
        _notify_stopped(notifier, f"the loop failed: {type(err).__name__}")
        raise
    say(f"stopped: {why}")
    if notifier is not None:
        notifier.stopped(why)
    if not why.startswith("stopped by Ctrl-C"):
        with ProgressObserver(workspace.dir, console) as observer:
            _confirm(workspace, ObservedRunner(trainer, observer))
    _where(workspace)
    _finish(workspace, tracking, notifier)


def _night_workspace(settings: RunSettings, workspace, track: str):
    """The checked tag's workspace, created if new, following the one --program given."""
    if workspace is None:
        workspace = _create(settings.tag, track, settings.program[0] if settings.program else DEFAULT_PROGRAM,
                            settings.workspaces, settings.cache, settings.profile)
        chose = "" if settings.track else " for this machine; --track chooses another"
        console.print(f"created {workspace.dir} (track {track}{chose})")
    if len(settings.program) == 1:
        workspace.follow_program(settings.program[0])
    return workspace


def _checked_night(settings: RunSettings):
    """The tag's workspace (None for a new tag) and its track, after every check that needs neither a proposer
    nor a runner: nothing is created here."""
    from agent.importing.imported import cannot_continue
    from agent.judging.plateau import settings_problem as plateau_problem
    from agent.tracking.notify.night import webhook_problem
    from agent.workspace import NoWorkspace, Workspace, WorkspaceError
    for problem in (unknown_proposer(settings.proposer), webhook_problem(settings.notify)):
        if problem:
            fail(problem)
    for program in settings.program[:1]:
        _check_program(program)
    try:
        workspace = Workspace.open(settings.tag, settings.workspaces)
    except NoWorkspace:
        workspace = None
    except WorkspaceError as err:
        fail(str(err))
    if workspace is not None and (imported := cannot_continue(workspace)):
        fail(imported)
    track = workspace.settings["track"] if workspace is not None else _new_track(settings.track)
    if workspace is None:
        _profile(track, settings.profile)
    if problem := plateau_problem(settings, track):
        fail(problem)
    return workspace, track


def _new_track(asked: str | None) -> str:
    """The track asked for, else gpu on a machine with a CUDA GPU, else cpu (what a new tag takes)."""
    if asked is not None:
        if asked not in TRACKS:
            close = difflib.get_close_matches(asked, list(TRACKS), n=1)
            fail(f"unknown track {shown_repr(asked)}: use {', '.join(TRACKS)}"
                 + (f" (did you mean {close[0]}?)" if close else ""))
        return asked
    from trainer.tracks.profiles import default_track
    return default_track()


def _prepared_proposer(settings: RunSettings):
    from agent.proposers.registry import ProposerRequest, ProposerUnavailable, prepare_proposer
    try:
        return prepare_proposer(ProposerRequest(settings, settings.tag, say=console.print,
                                                warn=lambda warning: console.print(f"[yellow]{warning}[/yellow]")))
    except ProposerUnavailable as err:
        fail(str(err))


def _finish(workspace, tracking, notifier) -> None:
    from agent.report.build import write_report
    report = write_report(workspace)
    console.print(f"report: {report}")
    if tracking is not None and not tracking.stop():
        say(f"MLflow: some records are not in {tracking.uri} yet; the next `run --tag {workspace.tag} --mlflow "
            f"{tracking.uri}` sends them")
    if notifier is not None:
        notifier.night_ended(report)
        notifier.close()


def _report_anyway(workspace) -> None:
    """The report of a night that stopped on an error, the night a user most needs to read; a report that cannot
    be written says why in a line and leaves the error that stopped the night to be said."""
    from agent.report.build import write_report
    try:
        console.print(f"report: {write_report(workspace)}")
    except Exception as err:  # noqa: BLE001 - the stop's own error comes next and matters more
        console.print(Text(f"the report could not be written: {type(err).__name__}: {err}"[:500]))


def _notify_stopped(notifier, why: str) -> None:
    """The loop will not go on to the report: its stop is the last notification."""
    if notifier is not None:
        notifier.stopped(why)
        notifier.close()


def _start_notifying(urls: list[str], workspace):
    if not urls:
        return None
    from agent.tracking.notify.night import NightNotifier
    notifier = NightNotifier(workspace, urls, say=say)
    console.print("notifications: " + ", ".join(hook.masked() for hook in notifier.hooks))
    return notifier.start()


def _start_tracking(option: str | None, workspace):
    from agent.tracking.mlflow_sync import MlflowSync, TrackingUnavailable, tracking_uri
    if (uri := tracking_uri(option)) is None:
        return None
    try:
        tracking = MlflowSync(uri, workspace, say=say)
    except TrackingUnavailable as err:
        fail(str(err))
    console.print(f"MLflow: mirroring {workspace.tag} to {uri}")
    tracking.sync()
    return tracking.start()


def _use_cache(cache: Path | None) -> None:
    if cache is not None:
        os.environ["AUTORESEARCH_CACHE"] = str(cache.expanduser().resolve())


def _runner(options: RunnerOptions):
    from agent.running.registry import RUNNERS, RunnerUnavailable
    try:
        return RUNNERS[implied_runner(options)].make(options)
    except RunnerUnavailable as err:
        fail(str(err))


@app.command()
def confirm(tag: TagOption = "demo", workspaces: WorkspacesOption = None, cache: CacheOption = None,
            spool: Annotated[Path | None, typer.Option(help="Evaluate on the trainer workers of this spool.")] = None,
            ray_address: Annotated[str | None, typer.Option(help="Evaluate on this Ray cluster (HOST:PORT).")] = None,
            ) -> None:
    """Score the baseline's and the best's saved weights on val and on the holdout split that no decision read."""
    _use_cache(cache)
    workspace = open_workspace(tag, workspaces)
    if not _confirm(workspace, _runner(RunnerOptions(spool=spool, ray_address=ray_address))):
        raise typer.Exit(1)


def _confirm(workspace, trainer) -> bool:
    from agent.judging.confirm import ConfirmError, confirm
    try:
        out = confirm(workspace, trainer)
    except ConfirmError as err:
        console.print(f"holdout confirmation: {err}")
        return False
    base, best = out.baseline, out.best
    console.print(f"holdout confirmation: baseline {base.id} holdout {base.holdout:.6f}, best {best.id} "
                  f"holdout {best.holdout:.6f}: gain {out.holdout_gain:+.6f} on holdout vs "
                  f"{out.search_gain:+.6f} on the searched val split ({workspace.dir / 'confirmation.json'})")
    for warning in out.warnings:
        console.print(f"warning: {warning}", style="yellow", markup=False)
    return True


@app.command()
def steer(tag: TagOption, program: Annotated[Path | None, typer.Argument(
              help="The research program to switch to.")] = None,
          note: Annotated[str | None, typer.Option(help="A note to add to the research notes (notes.md), which "
                                                        "every later proposal sees.")] = None,
          workspaces: WorkspacesOption = None) -> None:
    """Swap the research program of a tag, or add a note for the researcher, running or not: the next
    experiment is proposed under it."""
    from agent.recording.notes import NotesFull, append_user_note
    if program is None and note is None:
        fail("give a research program to switch to, a --note to add, or both")
    workspace = open_workspace(tag, workspaces)
    if program is not None:
        _check_program(program)
        workspace.follow_program(program)
        console.print(f"{tag} now follows {program.resolve()} from its next experiment on")
    if note is not None:
        try:
            notes = append_user_note(workspace.dir, note)
        except NotesFull as err:
            fail(str(err))
        console.print(f"added to {tag}'s notes ({notes.size} bytes now); the next proposal sees it")


@app.command()
def transcript(tag: TagOption = "demo", experiment: Annotated[str | None, typer.Argument(
        help="Experiment id (default: the latest).")] = None, workspaces: WorkspacesOption = None,
               as_json: Annotated[bool, typer.Option("--json", help="Print its events as JSON lines, one event a "
                                                                    "line, for machines.")] = False,
               follow: Annotated[bool, typer.Option(help="Show its panels as they happen, until its decision; "
                                                         "without an id, each new experiment's in turn, until "
                                                         "Ctrl-C.")] = False) -> None:
    """Print one experiment's transcript readably: a panel for the proposal, each run, verification and the
    decision."""
    from agent.recording.transcript import Transcript
    from agent.report.transcript_view import follow as follow_transcripts
    from agent.report.transcript_view import render
    from agent.running.run_progress import PROGRESS_FILE
    workspace = open_workspace(tag, workspaces)
    if follow and not as_json:
        known = {p.stem for p in (workspace.dir / "transcripts").glob("*.jsonl")}
        if experiment is not None and experiment not in known and not experiment.isdigit():
            fail(f"no transcript for experiment {shown_repr(experiment)}: give an id such as 0012, or none")
        with suppress(KeyboardInterrupt):
            follow_transcripts(workspace.dir / "transcripts", experiment,
                               lambda panel: console.print(panel, soft_wrap=False),
                               running=lambda: (workspace.dir / PROGRESS_FILE).exists())
        return
    if not (paths := sorted((workspace.dir / "transcripts").glob("*.jsonl"))):
        fail(f"{tag} has no transcripts yet")
    named = {p.stem: p for p in paths}
    if experiment is not None and experiment not in named:
        fail(f"no transcript for experiment {shown_repr(experiment)}: there are {', '.join(named)}")
    path = named[experiment] if experiment is not None else paths[-1]
    events = Transcript(path).events()
    if as_json:
        for event in events:  # re-encoded: non-ASCII and control characters escaped, a torn line left out
            typer.echo(json.dumps(event))
        return
    console.print(render(events, path.stem), soft_wrap=False)  # wrapped at the width, not cropped


@app.command()
def status(tag: TagOption = "demo", workspaces: WorkspacesOption = None,
           watch: Annotated[bool, typer.Option(help="Refresh until Ctrl-C.")] = False,
           interval: Annotated[float, typer.Option(help="Seconds between refreshes with --watch.")] = 5.0,
           as_json: Annotated[bool, typer.Option("--json", help="One JSON object for a script to read.")] = False
           ) -> None:
    """Best so far, counts, keep rate, cost, and the experiment running now."""
    from rich.live import Live

    from agent.report.status_view import status_view
    workspace = open_workspace(tag, workspaces)
    if as_json:
        from agent.report.status_json import night_status
        # through pydantic's JSON, which writes a number no JSON can hold (a run that printed 1e308 twice) as null
        said = json.loads(night_status(workspace).model_dump_json())
        typer.echo(json.dumps(said, indent=2, ensure_ascii=True))
        return
    if not watch:
        console.print(status_view(workspace))
        return
    with suppress(KeyboardInterrupt):
        if not console.is_terminal:  # a log or a pipe: a dated snapshot per interval, never a redraw
            while True:
                console.print(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')}")
                console.print(status_view(workspace))
                time.sleep(interval)
        with Live(status_view(workspace), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(interval)
                live.update(status_view(workspace))


@app.command()
def report(tag: Annotated[list[str], typer.Option(help="Tag to report on; repeat it to compare runs.",
                                                  callback=checked_tag)],
           workspaces: WorkspacesOption = None,
           plot_style: Annotated[str, typer.Option(help="The progress plot: ours, or reference (drawn as the "
                                                        "reference autoresearch's analysis notebook draws it).")]
           = "ours") -> None:
    """Write workspace/<tag>/report/index.html (self-contained) and progress.png; several tags are compared."""
    from agent.report.build import write_comparison, write_report
    from agent.report.plot import PLOT_STYLES
    from agent.workspace import default_root
    if plot_style not in PLOT_STYLES:
        fail(f"--plot-style {shown_repr(plot_style)} is not one of {', '.join(PLOT_STYLES)}")
    opened = [open_workspace(t, workspaces) for t in tag]
    for workspace in opened:
        console.print(f"{workspace.tag}: {write_report(workspace, plot_style)}")
    if len(opened) > 1:
        destination = (workspaces or default_root()) / ("compare-" + "-".join(tag))
        console.print(f"compared: {write_comparison(opened, destination)}")


@app.command()
def export(tag: TagOption = "demo", workspaces: WorkspacesOption = None,
           to: Annotated[Path | None, typer.Option(help="The folder to write (default <workspaces>/<tag>-bundle); "
                                                        "it must not exist.")] = None) -> None:
    """Write the best train.py, its patch against the baseline, and a bundle another person can check with
    `autoresearch verify` (each keep's diff, its runs' logs up to the seal and seeds, the transcripts with keys and
    paths scrubbed, the model ids, costs, hardware, tolerances)."""
    from agent.bundle.export import NothingToExport, write_bundle
    from agent.bundle.manifest import BEST_TRAIN, PATCH
    workspace = open_workspace(tag, workspaces)
    destination = (to or workspace.dir.parent / f"{tag}-bundle").expanduser().absolute()
    if destination.exists():
        fail(f"{destination} already exists: remove it or give --to a new folder")
    try:
        bundle = write_bundle(workspace, destination)
    except NothingToExport as err:
        fail(str(err))
    say(f"best {bundle.best_id}: val_bpb {bundle.best_val_bpb:.6f}, {bundle.gain:+.6f} from the baseline's "
        f"{bundle.baseline_val_bpb:.6f} over {len(bundle.keeps)} keep(s)")
    for warning in bundle.confirmation.warnings if bundle.confirmation else []:
        console.print(f"warning: {warning}", style="yellow", markup=False)
    say(f"train.py: {destination / BEST_TRAIN}\npatch against the baseline: {destination / PATCH}\n"
        f"bundle: {destination} (check it anywhere with `autoresearch verify {destination}`)")


@app.command()
def verify(bundle: Annotated[Path, typer.Argument(help="A folder `autoresearch export` wrote.")],
           runs: Annotated[int, typer.Option(help="Runs of each side, fresh seeds.", min=2, max=20)] = 3,
           cache: CacheOption = None) -> None:
    """Re-train a bundle's baseline and best on this machine, as any run is run (sandbox, trusted evaluator, this
    machine's frozen track), and say with Welch's t-test whether its gain reproduces. Exit 0: it does, against the
    track's own baseline; 3: only against a baseline of the bundle's own; 1: it does not."""
    from agent.bundle.manifest import BundleRefused, read_bundle
    from agent.bundle.reproduce import reproduce, screen
    from agent.running.runner import LocalRunner
    from trainer.tracks.hardware import this_machine
    from trainer.tracks.profiles import GPU_TRACKS
    _use_cache(cache)
    try:
        manifest, baseline, best = read_bundle(bundle.expanduser())
        screen(baseline, best)
    except BundleRefused as err:
        fail(str(err))
    if manifest.track not in TRACKS:
        fail(f"the bundle's track {shown_repr(manifest.track)} is not one of {', '.join(TRACKS)}")
    if manifest.track in GPU_TRACKS and this_machine().backend == "cpu":
        fail(f"the bundle was made on the {manifest.track} track and this machine has no GPU: verify it on one")
    prepared = _prepare(manifest.track, None, None, cache)
    say(f"verifying {manifest.tag}: best {manifest.best_id} against baseline {manifest.baseline_id}, {runs} runs "
        f"each on {this_machine().name}")
    try:
        found = reproduce(manifest, baseline, best, prepared, runs, LocalRunner(), say)
    except BundleRefused as err:
        fail(str(err))
    say(found.words())
    if not found.reproduces:
        raise typer.Exit(1)
    if found.baseline_changed:
        raise typer.Exit(3)  # the gain holds against a baseline the bundle chose: for a person to read, not a script


@app.command("import")
def import_night(source: Annotated[Path, typer.Option("--from", help="The checkout a night of the reference "
                                                                     "autoresearch loop ran in (with its "
                                                                     "results.tsv).")],
                 tag: Annotated[str | None, typer.Option(help="Tag of the new workspace (default: the branch's, "
                                                              "autoresearch/<tag>, else the checkout's folder and "
                                                              "the branch).", callback=checked_tag)]
                 = None,
                 branch: Annotated[str | None, typer.Option(help="The night's branch, local or a clone's "
                                                                 "remote one (default: the checked-out "
                                                                 "autoresearch/<tag> branch, or the only one).")]
                 = None,
                 program: ProgramOption = DEFAULT_PROGRAM, workspaces: WorkspacesOption = None,
                 cache: CacheOption = None) -> None:
    """Bring in a night of the reference autoresearch loop as a new tag: its results.tsv rows become experiments,
    its kept commits the branch; `status` and `report` read it, and `run` goes on from its best where it can."""
    from agent.importing.reference_import import import_reference
    from agent.importing.reference_night import ReferenceImportError
    _use_cache(cache)
    _check_program(program)
    # a killed import removes its half-built tag, as Ctrl-C does
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        night = import_reference(source.expanduser(), program.resolve(), tag, branch, workspaces)
    except ReferenceImportError as err:
        fail(escape_controls(str(err), keep_newlines=False))
    read = night.night
    say_line(f"imported {night.experiments} experiments ({night.keeps} kept besides the baseline) from {read.path} "
             f"into {night.workspace.dir} (track {night.track}, branch {night.workspace.branch})")
    say_line(f"read branch {read.branch}" + (" (remote)" if read.remote else "") + f" and {read.results_from}")
    if read.resolved_baseline:
        say_line(f"the baseline row's commit `baseline` is {read.resolved_baseline[:7]}, where the branch started")
    if mapped := night.workspace.settings["imported"]["statuses"]:
        say_line("statuses read as ours: " + ", ".join(f"{word} -> {ours}" for word, ours in mapped.items()))
    if night.without_diff:
        say_line(f"not in the checkout, so their diffs are not available: {', '.join(night.without_diff)}")
    say_line(f"`run --tag {night.workspace.tag}` refuses it: {night.cannot_continue}" if night.cannot_continue
             else f"`autoresearch run --tag {night.workspace.tag}` goes on from its best")


def _prepare(track: str, source: str | None, num_shards: int | None, cache: Path | None):
    from trainer.tracks.builder import prepare_track
    try:
        return prepare_track(track, source=source, num_shards=num_shards, cache=cache)
    except PrepareError as err:
        fail(str(err))


def _create(tag: str, track: str, program: Path, workspaces: Path | None, cache: Path | None,
            profile: str | None = None):
    from agent.workspace import Workspace, WorkspaceError
    _check_program(program)
    chosen = _profile(track, profile)
    prepared = _prepare(track, None, None, cache)
    say(chosen.describe())
    try:
        return Workspace.create(tag, prepared.spec, program.resolve(), workspaces, chosen)
    except WorkspaceError as err:
        fail(str(err))


def _profile(track: str, name: str | None):
    """The hardware profile for a track here (or the named one); a device none fits ends the command."""
    from trainer.tracks.profiles import ProfileError, profile_for
    try:
        return profile_for(track, name=name or None)  # an empty name (an unset compose variable): this machine's
    except ProfileError as err:
        fail(str(err))


def _check_program(program: Path) -> None:
    if not program.is_file():
        fail(f"research program {program} does not exist: pass --program PATH to a markdown file")


def _where(workspace) -> None:
    console.print(f"results: {workspace.dir / 'results.tsv'} and {workspace.dir / 'experiments.jsonl'}; "
                  f"transcripts: {workspace.dir / 'transcripts'}; logs: {workspace.dir / 'logs'}")


if __name__ == "__main__":
    app()
