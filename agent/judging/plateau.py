"""Plateaus: --plateau experiments in a row without a keep, and what the loop does then (--on-plateau).

The streak counts the experiments tried and not kept (discards and crashes) since the last keep or the last
plateau; an interrupted experiment or a superseded one (it beat its parent) says nothing against the program
and neither counts nor breaks it. The plateau is decided as the record that ends its streak is written, under
the loop's lock, and it is stored on that record (ExperimentRecord.plateau): a resumed tag counts from it, so
the same plateau is never acted on twice.

switch: the tag follows the next program of the rotation (--program a.md --program b.md) from its next experiment on;
the rotation starts at its first program, or at the one of them the tag follows now. A program may be listed
twice to come back to it; once the last one reaches its plateau the rotation is spent and the loop stops.
stop: the loop starts no more experiments (those in flight finish). continue: it only says so.
"""

from __future__ import annotations

from itertools import takewhile
from pathlib import Path

from agent.recording.record import ExperimentRecord, ExperimentStatus, Plateau
from agent.settings import LoopSettings, OnPlateau
from agent.workspace import Workspace

# A gpu night runs ~12 experiments an hour: 25 is two hours without progress. A cpu run is a minute, its
# model small and its noise large next to the gains left, so fewer misses in a row already say the program
# is spent. The test tracks check the service, not research: their nights end at --max-experiments.
DEFAULT_PLATEAU = {"gpu": 25, "gpu-flops": 25, "cpu": 15}
COUNTED = (ExperimentStatus.DISCARD, ExperimentStatus.CRASH)


class PlateauSettingsError(ValueError):
    """--plateau, --on-plateau and --program do not fit together; the message says what to change."""


def plateau_limit(settings: LoopSettings, track: str) -> int | None:
    """The streak that makes a plateau on this track, None for none."""
    return DEFAULT_PLATEAU.get(track) if settings.plateau is None else settings.plateau or None


def on_plateau(settings: LoopSettings) -> OnPlateau:
    return settings.on_plateau or (OnPlateau.SWITCH if settings.programs else OnPlateau.STOP)


def rotation(settings: LoopSettings) -> list[Path]:
    """The programs of the rotation (--program given more than once), resolved; every one must be a file."""
    paths = [Path(path).expanduser() for path in settings.programs]
    if missing := [str(path) for path in paths if not path.is_file()]:
        raise PlateauSettingsError(f"--program: research program(s) {', '.join(missing)} do not exist or are not "
                                   "files: give paths to markdown files, e.g. --program prompts/optimizer.md "
                                   "--program prompts/architecture.md")
    return [path.resolve() for path in paths]


def settings_problem(settings: LoopSettings, track: str) -> str | None:
    try:
        programs = rotation(settings)
    except PlateauSettingsError as err:
        return str(err)
    if (action := on_plateau(settings)) == OnPlateau.SWITCH and not programs:
        return "--on-plateau switch needs the programs to switch between: give --program a.md --program b.md"
    if action == OnPlateau.SWITCH and plateau_limit(settings, track) is None:
        return (f"--program given more than once rotates at plateaus, and the {track} track has none by default "
                "(or --plateau 0 was given): give --plateau N, the experiments in a row without a keep that move to "
                "the next program")
    return None


def describe(record: ExperimentRecord) -> str:
    """What the plateau ended by this record was and what the loop did, in one line."""
    plateau = record.plateau
    what = f"{plateau.streak} experiments without a keep ({plateau.since} to {record.id})"
    if plateau.action == OnPlateau.SWITCH.value:
        return f"{what}; switched to program {Path(plateau.program).stem} ({plateau.program})"
    if plateau.action == OnPlateau.STOP.value:
        spent = "; every program of the rotation reached its plateau" if plateau.rotation_spent else ""
        return f"{what}{spent}; stopped starting experiments"
    return f"{what}; continued"


def stop_reason(record: ExperimentRecord) -> str:
    """Why the loop stopped at this record's plateau, as run_loop returns it."""
    plateau = record.plateau
    spent = "; every program of the rotation reached its plateau" if plateau.rotation_spent else ""
    return f"plateau: {plateau.streak} experiments without a keep{spent}"


def streak(records: list[ExperimentRecord]) -> list[ExperimentRecord]:
    """The experiments not kept since the last keep or the last plateau, oldest first."""
    since = takewhile(lambda r: r.status != ExperimentStatus.KEEP and r.plateau is None, reversed(records))
    return [record for record in since if record.status in COUNTED][::-1]


def plateaus(records: list[ExperimentRecord]) -> list[ExperimentRecord]:
    return [record for record in records if record.plateau is not None]


def plateau_lines(records: list[ExperimentRecord]) -> list[str]:
    """What `status` says of plateaus: the experiments without a keep so far, and the last plateau."""
    if not (ended := plateaus(records)):
        return []
    last = ended[-1]
    return [f"plateaus: {len(ended)}; the last ended at {last.id} ({last.finished or 'time unknown'}): "
            f"{describe(last)}; {len(streak(records))} experiment(s) without a keep since"]


class Plateaus:
    def __init__(self, workspace: Workspace, settings: LoopSettings):
        self.workspace, track = workspace, workspace.track.track
        self.limit = plateau_limit(settings, track)
        self.action = on_plateau(settings)
        self.problem = settings_problem(settings, track)  # the loop refuses to start with one
        self.programs = rotation(settings) if self.problem is None else []

    def start(self, records: list[ExperimentRecord]) -> str | None:
        """Puts the tag on the rotation's first program unless it follows one of it; says what a plateau will do."""
        programs = self.programs
        if programs and self._position(programs, records) is None:
            self.workspace.follow_program(programs[0])
        if self.limit is None:
            return None
        so_far = len(streak(records))
        then = {OnPlateau.SWITCH: "switch to the next program of the rotation", OnPlateau.STOP: "stop",
                OnPlateau.CONTINUE: "say so and go on"}[self.action]
        return (f"plateau: after {self.limit} experiments in a row without a keep the loop will {then} "
                f"({so_far} so far" + (f", following program {self._current().stem}" if programs else "") + ")")

    def ended_by(self, records: list[ExperimentRecord], record: ExperimentRecord) -> Plateau | None:
        """The plateau this record, about to follow `records` in the ledger, ends, acted on; None if none."""
        if self.limit is None or record.status not in COUNTED:
            return None
        missed = streak(records) + [record]
        if len(missed) < self.limit:
            return None
        plateau = Plateau(streak=len(missed), since=missed[0].id, action=self.action.value)
        if self.action == OnPlateau.SWITCH:
            programs = self.programs
            position = self._position(programs, records)
            if (following := 0 if position is None else position + 1) < len(programs):
                self.workspace.follow_program(programs[following])
                plateau.program, plateau.position = str(programs[following]), following
            else:
                plateau.action, plateau.rotation_spent = OnPlateau.STOP.value, True
        return plateau

    def _current(self) -> Path:
        return Path(self.workspace.settings["program"]).resolve()

    def _position(self, programs: list[Path], records: list[ExperimentRecord]) -> int | None:
        """Where in the rotation the tag is: the place the last switch moved it to while it still follows that
        program (a program may be listed twice), else the first place of the program it follows."""
        current = self._current()
        switches = [r.plateau for r in plateaus(records) if r.plateau.position is not None]
        if switches and switches[-1].position < len(programs) and programs[switches[-1].position] == current:
            return switches[-1].position
        return programs.index(current) if current in programs else None
