"""A transcript rendered for the terminal: every kind of event readable, a real night's steps as panels (the
proposal, each run, verification, the decision), untrusted text made harmless; --json for machines."""

import io
import json
import threading
import time

from rich.console import Console
from typer.testing import CliRunner

from agent import cli
from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from agent.recording.transcript import Transcript
from agent.report.transcript_view import follow, render
from tests.helpers.scripted import ScriptedEdits
from tests.helpers.synthetic_runner import SyntheticRunner

EVENTS = [
    {"v": 1, "t": "2026-12-03T01:00:00+0000", "type": "llm_request", "provider": "anthropic", "model": "opus",
     "program": "program", "system_sha256": "f" * 64, "user": "Propose experiment 0001"},
    {"v": 1, "t": "", "type": "thinking", "text": "The schedule decays too early."},
    {"v": 1, "t": "", "type": "assistant", "text": "Reading train.py", "stop_reason": "tool_use",
     "usage": {"input_tokens": 1200, "output_tokens": 80, "cost_usd": 0.0123, "cache_read_tokens": 900},
     "service_model": "claude-opus-4-8-20261101", "request_id": "req_1"},
    {"v": 1, "t": "", "type": "tool_call", "id": "c1", "name": "read_file", "arguments": {"path": "train.py"}},
    {"v": 1, "t": "", "type": "tool_result", "id": "c1", "name": "read_file", "is_error": True,
     "content": "\x1b[2J[bold red]cleared[/bold red]" + "x" * 5000},
    {"v": 1, "t": "", "type": "committed", "commit": "b" * 40, "diff": "-LR = 0.04\n+LR = 0.05\n"},
    {"v": 1, "t": "", "type": "decision", "status": "discard", "triage": "ok", "reason": "no gain",
     "runs": [{"seed": 43, "val_bpb": 2.51}], "evidence": {"rule": "gain > 0", "sigma": None, "gain": -0.01}},
    {"v": 1, "t": "", "type": "run_finished", "returncode": 0, "seconds": 12.5},
]


def shown(events, width=120) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    console.print(render(events, "0001"))
    return console.file.getvalue()


def test_every_kind_of_event_is_shown_with_what_a_reader_needs():
    text = shown(EVENTS)
    assert text.startswith("experiment 0001")
    assert "request to anthropic:opus (program program, system ffffffffffff)" in text
    assert "The schedule decays too early." in text
    assert "tokens in 1200 out 80, $0.0123 (cache read 900, written 0)" in text and "req_1" in text
    assert '"path": "train.py"' in text and "tool result read_file" in text
    assert "committed bbbbbbb" in text and "+LR = 0.05" in text
    assert "discard (ok): no gain" in text and "seed 43: 2.51" in text and "rule: gain > 0" in text
    assert "run, seed None" in text and "printed val_bpb -, triage None, 12.5 s" in text


def test_untrusted_text_is_clipped_and_reaches_the_terminal_neither_as_escapes_nor_as_markup():
    text = shown(EVENTS[4:5], width=3000)
    assert "\x1b" not in text and "[bold red]cleared[/bold red]" in text
    assert "more characters)" in text and text.count("x") < 1200  # clipped to its first 1200 characters


def test_a_real_nights_transcript_reads_as_proposal_runs_verification_and_decision(workspace):
    change = ("warmdown 0.3", "WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.3")
    runner = SyntheticRunner({"WARMDOWN_RATIO = 0.3": 0.009})  # inside 2 sigma: a close call, verified, re-run
    run_loop(workspace, ScriptedEdits(change), runner, LoopSettings(max_experiments=2, noise_seeds=2),
             say=lambda _: None)
    record = Ledger(workspace.dir).records[-1]
    assert record.id == "0001" and len(record.runs) == 2
    text = shown(Transcript(workspace.dir / record.transcript).events(), width=200)
    assert "change: warmdown 0.3" in text and "asked against" in text and "+WARMDOWN_RATIO = 0.3" in text
    for run in record.runs:
        assert f"run, seed {run.seed}" in text and f"printed val_bpb {run.printed:.6f}, triage ok" in text
    assert "re-run: " in text  # the close call's reason, shown with the run it asked for
    assert "verification" in text and "passed: the trusted evaluator's scores stand" in text
    assert f"{record.status.value} (ok): {record.reason[:40]}" in text
    assert "test: gain +" in text and "runs 2 vs the best's 3" in text
    assert '"type"' not in text  # no raw JSON lines

    raw = CliRunner().invoke(cli.app, ["transcript", "--tag", workspace.tag, "0001", "--json", "--workspaces",
                                       str(workspace.dir.parent)])
    assert raw.exit_code == 0, raw.output
    assert [json.loads(line) for line in raw.output.splitlines()] == Transcript(
        workspace.dir / record.transcript).events()


def test_the_command_wraps_at_the_terminal_s_width_and_loses_none_of_the_reason(workspace):
    change = ("warmdown 0.3", "WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.3")
    run_loop(workspace, ScriptedEdits(change), SyntheticRunner({"WARMDOWN_RATIO = 0.3": 0.05}),
             LoopSettings(max_experiments=2), say=lambda _: None)
    record = Ledger(workspace.dir).records[-1]
    said = CliRunner().invoke(cli.app, ["transcript", "--tag", workspace.tag, "0001", "--workspaces",
                                        str(workspace.dir.parent)], env={"COLUMNS": "60"})
    assert said.exit_code == 0, said.output
    assert max(len(line) for line in said.output.splitlines()) <= 60
    words = " ".join(line.strip("│ ") for line in said.output.splitlines())
    assert " ".join(record.reason.split()) in " ".join(words.split())  # every word of it, wrapped, none cut


def test_follow_shows_each_panel_once_as_the_transcript_grows_and_stops_at_the_decision(tmp_path):
    transcripts = tmp_path / "transcripts"
    transcripts.mkdir()
    story = [{"t": "", "type": "proposal_started", "proposer": "llm", "parent": "a" * 40, "program": "p"},
             {"t": "", "type": "proposal", "description": "warmdown 0.3", "edits": []},
             {"t": "", "type": "committed", "commit": "b" * 40, "diff": "-A = 1\n+A = 2\n"},
             {"t": "", "type": "run_started", "seed": 7, "commit": "b" * 40, "runner": "local"},
             {"t": "", "type": "run_finished", "seed": 7, "triage": "ok", "seconds": 3.0,
              "summary": {"val_bpb": "2.5"}},
             {"t": "", "type": "decision", "status": "keep", "triage": "ok", "reason": "a clear win", "runs": []}]
    written = threading.Event()

    def write_slowly():
        with open(transcripts / "0003.jsonl", "a") as file:
            for event in story:
                file.write(json.dumps(event) + "\n")
                file.flush()
                time.sleep(0.15)
        written.set()

    writer = threading.Thread(target=write_slowly)
    writer.start()
    out = []
    console = Console(file=io.StringIO(), width=120, color_system=None)

    def show(panel):
        console.file.seek(0)
        console.file.truncate()
        console.print(panel)
        out.append((written.is_set(), console.file.getvalue()))

    follow(transcripts, "0003", show, interval=0.05)
    writer.join()
    texts = [text for _, text in out]
    assert texts[0].strip() == "experiment 0003"
    assert len(texts) == 4 and "warmdown 0.3" in texts[1] and "run, seed 7" in texts[2] and "a clear win" in texts[3]
    assert "printed val_bpb 2.5" in texts[2]  # the run's panel waited for its end: one panel, not a half and a whole
    assert not out[1][0]  # the proposal was shown while the night went on, not read back at its end


def test_follow_without_an_id_stops_when_the_night_is_not_running(tmp_path):
    transcripts = tmp_path / "transcripts"
    transcripts.mkdir()
    for name in ("0001", "0002"):
        (transcripts / f"{name}.jsonl").write_text(json.dumps(
            {"t": "", "type": "decision", "status": "discard", "triage": "ok", "reason": f"no gain {name}"}) + "\n")
    checks = []

    def running():
        checks.append(1)
        return len(checks) < 3  # the loop stops while the reader waits

    shown = []
    follow(transcripts, None, lambda panel: shown.append(panel), interval=0.01, running=running)
    texts = [getattr(panel, "plain", "") or str(getattr(panel, "renderable", "")) for panel in shown]
    assert texts[0] == "experiment 0002"  # the latest, not the first
    assert any("no gain 0002" in t for t in texts) and not any("no gain 0001" in t for t in texts)
    assert texts[-2:] == ["waiting for the next experiment (Ctrl-C to stop)",
                          "the night is not running: nothing more to follow"]
