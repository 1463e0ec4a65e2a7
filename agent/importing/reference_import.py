"""`autoresearch import`: a reference night (agent/importing/reference_night.py) as a new workspace.

The workspace's root commit is the night's baseline train.py beside this harness's frozen prepare.py and the
matched track's track.json; each keep is a commit on it, in order, so the branch head is the last keep; a
discard or crash whose commit the checkout still holds is a commit on the best of its time that the branch
never reaches (as the loop leaves them). Each results.tsv row becomes an experiment record marked `imported`.

The track is the one whose constants are the reference prepare.py's and whose budget is wall-clock seconds,
as the reference's is; a night under other constants is refused, since its numbers compare with no track here.

Whether `run` may go on from the last keep is decided here and written to run.json: it may when the matched
track is prepared (its data fingerprint is what the workspace freezes) and the best's train.py is a script this
harness can run and verify. The reference's own train.py is not: the trusted evaluator rebuilds the scored model
through train.py's GPTConfig and build_model, which the reference's script does not define. Such a tag is
imported for `status`, `report` and the research memory, and `run` refuses it, saying why.
"""

from __future__ import annotations

import ast
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from agent.importing.reference_night import ReferenceCommit, ReferenceImportError, ReferenceNight, read_night
from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentRecord, ExperimentStatus, Imported
from agent.workspace import TAG_PATTERN, TRAINER_DIR, Workspace, WorkspaceError, default_root
from trainer.prepare import TRACKS, cache_root, track_dir
from trainer.track_builder import prepared_spec

# What the trusted evaluator imports from train.py to rebuild a scored model (trainer/model_process.py).
EVALUATOR_NEEDS = ("GPTConfig", "build_model")
STATUS = {"keep": ExperimentStatus.KEEP, "discard": ExperimentStatus.DISCARD, "crash": ExperimentStatus.CRASH}


@dataclass(frozen=True)
class ImportedNight:
    workspace: Workspace
    track: str
    experiments: int
    keeps: int
    without_diff: list[str]        # the commits of results.tsv the checkout does not hold
    cannot_continue: str | None    # why `run` refuses the tag, None where it may go on


def import_reference(path: Path, program: Path, tag: str | None = None, branch: str | None = None,
                     root: Path | None = None) -> ImportedNight:
    """Reads the night whole, then writes a new workspace; a night that cannot be read writes nothing."""
    night = read_night(path, branch)
    tag = tag or night.tag
    if not TAG_PATTERN.match(tag):
        raise ReferenceImportError(f"tag {tag!r} is not usable: give --tag with letters, digits, '.', '_' or '-'")
    directory = (root or default_root()) / tag
    if directory.exists():
        raise ReferenceImportError(f"workspace {directory} already exists: import under another --tag (the existing "
                                   "one was not touched)")
    track = matching_track(night.constants)
    spec = prepared_track(track)
    baseline = night.rows[0]
    first = night.commits.get(baseline.commit)
    if first is None:
        raise ReferenceImportError(f"{path / 'results.tsv'} line {baseline.line}: the baseline's commit "
                                   f"{baseline.commit} is not in the checkout, so the night's starting train.py is "
                                   "unknown; import from the checkout the night ran in")
    problems = continue_problems(night, track, spec is not None)
    settings = {"imported": {"from": str(night.path), "branch": night.branch,
                             "cannot_continue": "; ".join(problems) or None}}
    try:
        workspace = Workspace.create(tag, spec or unprepared_spec(track), program, root,
                                     baseline=(first.train_source, f"baseline: {baseline.description}"),
                                     settings=settings)
    except WorkspaceError as err:
        raise ReferenceImportError(str(err)) from err
    try:
        records = build_history(workspace, night)
        ledger = Ledger(workspace.dir)
        for record in records:
            ledger.append(record)
    except BaseException:  # a half-built tag would block the next try: it goes, the checkout was only read
        shutil.rmtree(workspace.dir, ignore_errors=True)
        raise
    return ImportedNight(workspace, track, len(records), sum(r.status == ExperimentStatus.KEEP for r in records),
                         [row.commit for row in night.rows if row.commit not in night.commits],
                         settings["imported"]["cannot_continue"])


def matching_track(constants: dict[str, int | float]) -> str:
    """The track with the reference's constants and a wall-clock budget; a clear refusal naming the differences
    from the nearest track where there is none."""
    wall_clock = {name: spec for name, spec in TRACKS.items()
                  if spec.get("step_budget") is None and spec.get("flops_budget") is None}

    def differences(spec: dict) -> list[str]:
        return [f"{key} {value:g} (track: {spec[key]:g})" for key, value in constants.items() if spec[key] != value]

    for name, spec in wall_clock.items():
        if not differences(spec):
            return name
    reference = ", ".join(f"{key} {value:g}" for key, value in TRACKS["gpu"].items() if key in constants)
    nearest = min(wall_clock, key=lambda name: len(differences(wall_clock[name])))
    raise ReferenceImportError(
        f"the night's prepare.py differs from track {nearest}, the nearest here: "
        f"{', '.join(differences(wall_clock[nearest]))}. No track here trains under its constants, so its numbers "
        "would compare with no run here and nothing was imported; import a night whose prepare.py constants are "
        f"the reference's ({reference})")


def prepared_track(track: str) -> dict | None:
    """The track's track.json as prepared in the cache (the text a workspace freezes), None where it is not."""
    directory = track_dir(track)
    return json.loads((directory / "track.json").read_text()) if prepared_spec(directory) is not None else None


def unprepared_spec(track: str) -> dict:
    """A track.json for a track not prepared here: its constants, no data fingerprint (such a tag cannot run)."""
    return {"track": track, "constants": TRACKS[track], "fingerprint": None, "prepared": False}


def continue_problems(night: ReferenceNight, track: str, prepared: bool) -> list[str]:
    problems = []
    if not prepared:
        problems.append(f"track {track} was not prepared in {cache_root()} when the night was imported, so the "
                        f"workspace has no data fingerprint to hold its runs to: run `autoresearch prepare --track "
                        f"{track}`, then import again under a new --tag")
    best = [row for row in night.rows if row.status == "keep"][-1]
    found = night.commits.get(best.commit)
    if found is None:
        problems.append(f"the best's commit {best.commit} is not in the checkout, so its train.py is unknown")
    elif missing := harness_gaps(found):
        problems.append(f"the best's train.py ({best.commit}) is a script this harness cannot verify: "
                        f"{'; '.join(missing)}. Port its changes onto the train.py of a new tag (`autoresearch init "
                        f"--tag NEW --track {track}`) and run that one")
    return problems


def harness_gaps(commit: ReferenceCommit) -> list[str]:
    """What a train.py lacks of the harness contract (DESIGN.md, train.py <-> harness), read from its source."""
    try:
        tree = ast.parse(commit.train_source)
    except SyntaxError as err:
        return [f"it does not parse ({err.msg}, line {err.lineno})"]
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    gaps = []
    if lacking := [name for name in EVALUATOR_NEEDS if name not in defined]:
        gaps.append(f"it defines no {' or '.join(lacking)}, which the trusted evaluator rebuilds the scored model with")
    offered = prepare_names()
    wanted = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "prepare"
              for alias in node.names}
    if unknown := sorted(wanted - offered):
        gaps.append(f"it imports {', '.join(unknown)} from prepare, which this harness's prepare.py does not have")
    return gaps


def prepare_names() -> set[str]:
    """The top-level names of this harness's prepare.py."""
    names = set()
    for node in ast.parse((TRAINER_DIR / "prepare.py").read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def build_history(workspace: Workspace, night: ReferenceNight) -> list[ExperimentRecord]:
    """The rows as records, each keep committed onto the best and the branch moved to it, each other row's
    commit (where the checkout holds it) committed on the best of its time."""
    records, when = [], 0.0
    for number, row in enumerate(night.rows):
        found = night.commits.get(row.commit)
        when = found.committed if found is not None else when  # a lost commit: the time of the row before
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(when))
        best = workspace.head()
        if number == 0:
            commit, parent = best, None
        elif found is not None:
            commit, parent = workspace.commit_train(found.train_source, row.description, best), best
        elif row.status == "keep":  # its train.py is unknown: the history keeps its place with the best's
            unknown = f"{row.description} (train.py unknown: {row.commit} is not in the checkout)"
            commit, parent = workspace.commit_train(workspace.file_at("train.py"), unknown, best), best
        else:
            commit, parent = "", best
        if number and row.status == "keep":
            workspace.advance_to(commit)
        records.append(ExperimentRecord(
            id=f"{number:04d}", status=STATUS[row.status], parent=parent, commit=commit,
            description=row.description, val_bpb=None if row.status == "crash" else row.val_bpb,
            peak_vram_mb=row.memory_gb * 1024 if row.memory_gb else None,
            proposer="baseline" if number == 0 else "reference",
            reason=f"imported from {night.path} ({night.branch}), results.tsv line {row.line}",
            diff=found.diff if found is not None and number else "", started=stamp, finished=stamp,
            imported=Imported(source=str(night.path), line=row.line, reference_commit=row.commit,
                              reference_parent=found.parent if found is not None else None,
                              diff_available=found is not None)))
    return records

