"""Plateaus through the real loop, on a runner that scores train.py from a table: a proposer whose changes never
beat the baseline runs into --plateau experiments in a row without a keep, and the loop switches the research
program (--program given more than once), stops, or goes on as --on-plateau says, records it on the experiment
that ended the streak, says it, and shows it in `status` and the report; a resumed tag counts from the last plateau."""

import io
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from agent import cli
from agent.loop import LoopSettings, LoopStopped, run_loop
from agent.proposers.base import Proposal, Proposer
from agent.proposers.edits import Edit
from agent.recording.ledger import Ledger
from agent.report.build import write_report
from agent.report.status_view import status_view
from agent.settings import OnPlateau
from tests.helpers.synthetic_runner import SyntheticRunner

WORSE = {f"WARMDOWN_RATIO = 0.{n:02d}": -0.01 for n in range(10, 40)}  # each a clear loss against the baseline
BETTER = {"MATRIX_LR = 0.05": 0.02}


class Warmdowns(Proposer):
    """Proposes WARMDOWN_RATIO = 0.10, 0.11, ... (never better), or a listed change at its turn, and keeps the
    program each conversation was given."""

    name = "warmdowns"

    def __init__(self, at: dict[int, str] | None = None, first: int = 10):
        self.at, self.count, self.first = at or {}, 0, first
        self.programs: dict[str, str] = {}

    def propose(self, context, transcript):
        self.programs[context.experiment_id] = context.program_name
        self.count += 1
        change = self.at.get(self.count, f"WARMDOWN_RATIO = 0.{self.first - 1 + self.count:02d}")
        setting = change.split(" = ")[0]
        line = re.search(rf"^{setting} = \S+", context.train_source, re.MULTILINE).group(0)
        return Proposal(change, [Edit(line, change)])


def night(workspace, proposer, messages, **settings):
    return run_loop(workspace, proposer, SyntheticRunner(WORSE | BETTER),
                    LoopSettings(noise_seeds=0, overlap=False, **settings), say=messages.append)


@pytest.fixture
def programs(tmp_path):
    made = []
    for name in ("optimizer", "architecture"):
        path = tmp_path / f"{name}.md"
        path.write_text(f"Research the {name}.\n")
        made.append(path)
    return made


def test_a_plateau_switches_to_the_next_program_and_the_last_ones_stops_the_loop(workspace, programs):
    proposer, messages = Warmdowns(), []
    why = night(workspace, proposer, messages, plateau=3, programs=list(programs), max_experiments=20)
    assert why == "plateau: 3 experiments without a keep; every program of the rotation reached its plateau"
    records = Ledger(workspace.dir).records
    assert [r.id for r in records] == [f"{n:04d}" for n in range(7)]
    assert [r.program.name for r in records[1:]] == ["optimizer"] * 3 + ["architecture"] * 3
    assert proposer.programs == {r.id: r.program.name for r in records[1:]}  # what each conversation was given
    switched, stopped = records[3].plateau, records[6].plateau
    assert (switched.action, switched.since, switched.streak) == ("switch", "0001", 3)
    assert (switched.program, switched.position) == (str(programs[1].resolve()), 1)
    assert (stopped.action, stopped.since, stopped.rotation_spent) == ("stop", "0004", True)
    assert [r.id for r in records if r.plateau is not None] == ["0003", "0006"]
    assert workspace.settings["program"] == str(programs[1].resolve())
    assert ("plateau: 3 experiments without a keep (0001 to 0003); switched to program architecture "
            f"({programs[1].resolve()})") in messages
    assert any(m.startswith("plateau: 3 experiments without a keep (0004 to 0006); every program") for m in messages)


def test_a_plateau_stops_the_loop_and_a_resumed_tag_counts_from_it(workspace):
    messages = []
    why = night(workspace, Warmdowns(), messages, plateau=3, on_plateau=OnPlateau.STOP, max_experiments=10)
    assert why == "plateau: 3 experiments without a keep"
    records = Ledger(workspace.dir).records
    assert len(records) == 4 and records[-1].plateau.action == "stop" and records[-1].plateau.since == "0001"
    assert "plateau: 3 experiments without a keep (0001 to 0003); stopped starting experiments" in messages

    # resumed: the plateau acted on stays acted on; two more without a keep are not a plateau of three
    assert night(workspace, Warmdowns(first=20), [], plateau=3, on_plateau=OnPlateau.STOP,
                 max_experiments=2) == "ran 2 experiment(s), the limit for this run"
    assert [r.id for r in Ledger(workspace.dir).records if r.plateau is not None] == ["0003"]
    # the streak goes on across resumes: a third one is
    resumed = []
    assert night(workspace, Warmdowns(first=30), resumed, plateau=3, on_plateau=OnPlateau.STOP,
                 max_experiments=5) == "plateau: 3 experiments without a keep"
    assert "plateau: after 3 experiments in a row without a keep the loop will stop (2 so far)" in resumed
    assert [(r.id, r.plateau.since) for r in Ledger(workspace.dir).records if r.plateau] == [("0003", "0001"),
                                                                                             ("0006", "0004")]


def test_continue_only_says_so_and_a_keep_starts_the_count_again(workspace):
    messages = []
    proposer = Warmdowns(at={3: "MATRIX_LR = 0.05"})  # 0003 is kept
    why = night(workspace, proposer, messages, plateau=2, on_plateau=OnPlateau.CONTINUE, max_experiments=8)
    assert why == "ran 8 experiment(s), the limit for this run"
    records = Ledger(workspace.dir).records
    assert records[3].status == "keep"
    assert [(r.id, r.plateau.since, r.plateau.action) for r in records if r.plateau] == [
        ("0002", "0001", "continue"), ("0005", "0004", "continue"), ("0007", "0006", "continue")]
    assert "plateau: 2 experiments without a keep (0001 to 0002); continued" in messages


def test_status_and_the_report_show_when_plateaus_happened_and_what_was_done(workspace, programs):
    night(workspace, Warmdowns(), [], plateau=2, programs=list(programs), max_experiments=4)
    out = io.StringIO()
    Console(file=out, width=300).print(status_view(workspace))
    shown = out.getvalue()
    assert re.search(r"plateaus: 1; the last ended at 0002 \(\S+\): 2 experiments without a keep \(0001 to 0002\); "
                     r"switched to program architecture .*; 1 experiment\(s\) without a keep since", shown), shown
    html = write_report(workspace).read_text()
    assert "<b>0002</b>" in html and "2 experiments without a keep (0001 to 0002); switched to program " \
                                     "architecture" in html


def test_bad_plateau_settings_are_refused_before_anything_starts(workspace, programs, tmp_path):
    missing = tmp_path / "nowhere.md"
    for settings, problem in (
            (dict(plateau=3, programs=[programs[0], missing]), f"research program(s) {missing} do not exist"),
            (dict(plateau=3, on_plateau=OnPlateau.SWITCH), "--on-plateau switch needs the programs"),
            (dict(programs=list(programs)), "the test track has none by default")):
        with pytest.raises(LoopStopped, match=re.escape(problem)):
            night(workspace, Warmdowns(), [], **settings)
    assert Ledger(workspace.dir).records == [] and not (workspace.dir / "transcripts").exists()
    assert workspace.settings["program"].endswith("program.md")


def test_run_refuses_bad_programs_before_creating_the_tag(tmp_path, programs):
    missing = tmp_path / "nowhere.md"
    for arguments, problem in ((["--program", str(programs[0]), "--program", str(missing)], f"{missing} do not exist"),
                               (["--program", str(missing)], f"research program {missing} does not exist")):
        result = CliRunner().invoke(cli.app, ["run", "--workspaces", str(tmp_path / "ws"), "--track", "test",
                                              "--plateau", "3", *arguments], terminal_width=300)
        assert result.exit_code == 2 and problem in " ".join(result.output.split()), result.output
    assert not (tmp_path / "ws").exists()
