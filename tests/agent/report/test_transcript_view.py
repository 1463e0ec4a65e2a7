"""A transcript rendered for the terminal: every kind of event readable, a real night's steps as panels (the
proposal, each run, verification, the decision), untrusted text made harmless; --json for machines."""

import io
import json

from rich.console import Console
from typer.testing import CliRunner

from agent import cli
from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from agent.recording.transcript import Transcript
from agent.report.transcript_view import render
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
