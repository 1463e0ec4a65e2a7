"""`autoresearch import`: a reference night (agent/importing/reference_night.py) as a new workspace.

The workspace's root commit is the night's baseline train.py beside this harness's frozen prepare.py and the
matched track's track.json; each keep is a commit on it, in order, so the branch head is the last keep; a
discard or crash whose commit the checkout still holds is a commit on the best of its time that the branch
never reaches (as the loop leaves them). Each results.tsv row becomes an experiment record marked `imported`.

The track is the one whose constants are the night's prepare.py's and whose budget is wall-clock seconds, as
the reference's is. A night under other constants (an MLX fork's EVAL_TOKENS, a 1200 s budget) is imported too,
under the track name IMPORTED_TRACK with its own constants: readable by `status`, `report` and the comparison of
tags, never continued, since its numbers compare with no run here.

Whether `run` may go on from the last keep (the branch head) is decided here and written to run.json: it may
when the matched track is prepared (its data fingerprint is what the workspace freezes), the baseline's train.py
is in the checkout, and the last keep's train.py is a script this harness can run and verify. The reference's own
train.py is not: the trusted evaluator rebuilds the scored model through train.py's GPTConfig and build_model,
which the reference's script does not define. Such a tag is imported for `status`, `report` and the research
memory, and `run` refuses it, saying why in the night's own words.
"""

from __future__ import annotations

import ast
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from agent.importing.reference_constants import Constant
from agent.importing.reference_night import ReferenceCommit, ReferenceImportError, ReferenceNight, read_night
from agent.importing.reference_results import BASELINE_COMMIT, status_mapping
from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentRecord, ExperimentStatus, Imported
from agent.workspace import TRAINER_DIR, Workspace, WorkspaceError, default_root, tag_problem
from trainer.prepare import TRACKS, cache_root, track_dir
from trainer.tracks.builder import prepared_spec
from trainer.tracks.spec import TrackConstants

# What the trusted evaluator imports from train.py to rebuild a scored model
# (trainer/evaluator/model_server/model_process.py).
EVALUATOR_NEEDS = ("GPTConfig", "build_model")
IMPORTED_TRACK = "imported"  # the track of a night under constants no track here has
HARDWARE_COLUMNS = ("gpu", "device", "hardware")
# a fork's reasoning columns -> the record's research fields, shown where this harness's own reasoning is
REASONING_COLUMNS = {"hypothesis": "hypothesis", "expected": "expected", "expectation": "expected",
                     "prediction": "expected", "lesson": "lesson", "interpretation": "lesson", "learned": "lesson",
                     "takeaway": "lesson"}
UNKNOWN_TRAIN = "# the night's baseline train.py is not in the checkout it was imported from\n"


@dataclass(frozen=True)
class ImportedNight:
    workspace: Workspace
    night: ReferenceNight
    track: str
    experiments: int
    keeps: int                     # keeps besides the baseline
    without_diff: list[str]        # the commits of results.tsv the checkout does not hold
    cannot_continue: str | None    # why `run` refuses the tag, None where it may go on


def import_reference(path: Path, program: Path, tag: str | None = None, branch: str | None = None,
                     root: Path | None = None) -> ImportedNight:
    """Reads the night whole, then writes a new workspace; a night that cannot be read writes nothing."""
    if tag is not None:
        free_tag(tag, root)
    night = read_night(path, branch)
    tag = tag or night.tag
    free_tag(tag, root)
    track, differences = matching_track(night.constants)
    spec = prepared_track(track) if track else None
    problems = continue_problems(night, track or IMPORTED_TRACK, differences, spec is not None)
    settings = {"imported": {
        "from": str(night.path), "branch": night.branch, "results": night.results_from,
        "constants": [constant.said() for constant in night.constants.values()],
        "hardware": hardware(night), "statuses": status_mapping(night.rows),
        "baseline_commit": night.resolved_baseline, "cannot_continue": "; ".join(problems) or None}}
    first = night.baseline()
    try:
        workspace = Workspace.create(tag, spec or unprepared_spec(track, night.constants), program, root,
                                     baseline=(first.train_source if first else UNKNOWN_TRAIN,
                                               f"baseline: {night.rows[0].description}"),
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
    return ImportedNight(workspace, night, track or IMPORTED_TRACK, len(records),
                         sum(r.status == ExperimentStatus.KEEP for r in records[1:]),
                         list(dict.fromkeys(row.commit for row in night.rows if row.commit not in night.commits)),
                         settings["imported"]["cannot_continue"])


def free_tag(tag: str, root: Path | None) -> None:
    if problem := tag_problem(tag):
        raise ReferenceImportError(f"tag {tag!r} {problem}: give --tag with letters, digits, '.', '_' or '-'")
    directory = (root or default_root()) / tag
    if directory.exists():
        raise ReferenceImportError(f"workspace {directory} already exists: import under another --tag (the existing "
                                   "one was not touched)")


def matching_track(constants: dict[str, Constant]) -> tuple[str | None, list[str]]:
    """The track with the night's constants and a wall-clock budget; else None and how the night differs from the
    nearest such track, in prepare.py's words."""
    wall_clock = {name: spec for name, spec in TRACKS.items() if not TrackConstants.model_validate(spec).counted}

    def differences(name: str) -> list[str]:
        spec = wall_clock[name]
        return [f"{constant.said()} where track {name} has {spec[key]}" for key, constant in constants.items()
                if spec[key] != constant.value]

    for name in wall_clock:
        if not differences(name):
            return name, []
    nearest = min(wall_clock, key=lambda name: len(differences(name)))
    return None, differences(nearest)


def hardware(night: ReferenceNight) -> str:
    """What the night's results.tsv says it ran on (a fork's gpu or device column), else that it did not say."""
    named = dict.fromkeys(value for row in night.rows for column, value in row.extra.items()
                          if column in HARDWARE_COLUMNS and value)
    return ", ".join(list(named)[:5]) if named else "not recorded by the night"


def prepared_track(track: str) -> dict | None:
    """The track's track.json as prepared in the cache (the text a workspace freezes), None where it is not."""
    directory = track_dir(track)
    return json.loads((directory / "track.json").read_text()) if prepared_spec(directory) is not None else None


def unprepared_spec(track: str | None, constants: dict[str, Constant]) -> dict:
    """A track.json for a track not prepared here (such a tag cannot run): the track's constants, or for a night
    under constants no track here has, the night's own."""
    own = {key: constant.value for key, constant in constants.items()}
    return {"track": track or IMPORTED_TRACK, "constants": TRACKS[track] if track else own, "fingerprint": None,
            "prepared": False}


def continue_problems(night: ReferenceNight, track: str, differences: list[str], prepared: bool) -> list[str]:
    if differences:
        return [f"the night ran under other constants than any track here ({'; '.join(differences)}), so a run "
                "here would compare with none of its numbers"]
    problems = []
    if not prepared:
        problems.append(f"track {track} was not prepared in {cache_root()} when the night was imported, so the "
                        f"workspace has no data fingerprint to hold its runs to: run `autoresearch prepare --track "
                        f"{track}`, then import again under a new --tag")
    if night.baseline() is None:
        problems.append(baseline_missing(night))
    head = [row for row in night.rows if row.status == "keep"][-1]
    found = night.commits.get(head.commit)
    if found is None:
        problems.append(f"the last keep's commit {head.commit} is not in the checkout, so its train.py is unknown")
    elif missing := harness_gaps(found):
        problems.append(f"the last keep's train.py ({head.commit}) is a script this harness cannot verify: "
                        f"{'; '.join(missing)}. Port its changes onto the train.py of a new tag (`autoresearch init "
                        f"--tag NEW --track {track}`) and run that one")
    return problems


def baseline_missing(night: ReferenceNight) -> str:
    row = night.rows[0]
    what = (f"results.tsv line {row.line} names the baseline `baseline` and git knows no starting point for it"
            if row.commit == BASELINE_COMMIT and night.resolved_baseline is None
            else f"the baseline's commit {night.resolved_baseline or row.commit} is not in the checkout")
    why = (": it is a shallow clone; run `git fetch --unshallow` in it, then import again under a new --tag"
           if night.shallow else "")
    return f"{what}, so the night's starting train.py is unknown{why}"


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
    commit (where the checkout holds it) committed on the best of its time. The night's clock starts at its
    first experiment's commit (the baseline's commit is usually the upstream's, days older)."""
    experiments = [found.committed for row in night.rows[1:] if (found := night.commits.get(row.commit))]
    first = night.baseline()
    records, when = [], experiments[0] if experiments else (first.committed if first else 0.0)
    for number, row in enumerate(night.rows):
        found = night.commits.get(row.commit)
        when = found.committed if found is not None and number else when  # a lost commit: the row before's
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
        written = (night.resolved_baseline or row.commit)[:7] if row.commit == BASELINE_COMMIT else row.commit
        records.append(ExperimentRecord(
            id=f"{number:04d}", status=ExperimentStatus(row.status), parent=parent, commit=commit,
            description=row.description, val_bpb=row.val_bpb,
            peak_vram_mb=row.memory_gb * 1024 if row.memory_gb else None,
            proposer="baseline" if number == 0 else "reference",
            reason=f"imported from {night.path} ({night.branch}), results.tsv line {row.line}",
            diff=found.diff if found is not None and number else "", started=stamp, finished=stamp,
            imported=Imported(source=str(night.path), line=row.line, reference_commit=written,
                              reference_parent=found.parent if found is not None else None,
                              diff_available=found is not None, status=row.written_status, extra=row.extra),
            **reasoning(row.extra)))
    return records


def reasoning(extra: dict[str, str]) -> dict[str, str]:
    """The hypothesis, expectation and lesson a fork wrote in columns of its own (the first column of each)."""
    return {field: value for column, value in reversed(extra.items())
            if (field := REASONING_COLUMNS.get(column.lower())) and value}
