"""The morning report, built from a ledger that a real loop (Optuna and a scripted LLM) produced."""

import io
import json
import re
import shutil
import subprocess
import sys
import time
from html import escape
from pathlib import Path

import pytest
from rich.console import Console

from agent.judging.confirm import confirm
from agent.llm.pricing import PriceTable
from agent.llm.select import conversation_factory
from agent.loop import LoopSettings, run_loop
from agent.proposers.hybrid import HybridProposer
from agent.proposers.llm import LLMProposer
from agent.proposers.optuna_search import OptunaProposer
from agent.recording.calibration import Calibration, calibration_path, read_calibration, store_calibration
from agent.recording.ledger import read_records
from agent.recording.record import ExperimentStatus
from agent.report.build import write_comparison, write_report
from agent.report.status_view import status_view
from agent.report.summary import headline
from agent.running.runner import LocalRunner
from agent.workspace import Workspace
from tests.helpers.llm_server import LLMServer, tool_call
from tests.helpers.submissions import reasoned
from trainer.prepare import cache_root
from trainer.tracks.hardware import this_machine

ROOT = Path(__file__).resolve().parents[3]
SCHEDULE = "    remaining = (1 - progress) / WARMDOWN_RATIO"
CLAMPED = "    remaining = max(0.0, (1 - progress) / WARMDOWN_RATIO)"
NOTES = "- open: does a shorter warm-down help at 30 steps? <b>dead end</b>: none yet\n"
HOSTILE_THOUGHT = "Try a shorter warm-down. <script>alert('x')</script> <img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def reported(test_track, tmp_path_factory):
    """A run of baseline, noise floor and 2 experiments (one from Optuna, one from a scripted LLM), confirmed on
    the holdout split, and its report."""
    root = tmp_path_factory.mktemp("workspaces")
    workspace = Workspace.create("night", test_track.spec, ROOT / "prompts" / "program.md", root=root)
    with LLMServer() as server, pytest.MonkeyPatch.context() as env:
        env.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        env.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url())
        # in hybrid the LLM changes code (Optuna owns the values)
        change = reasoned({"description": "clamp the warm-down at 0",
                           "edits": [{"old_string": SCHEDULE, "new_string": CLAMPED}]})
        server.script(tool_call("read_file", {"path": "train.py"}, thinking=HOSTILE_THOUGHT, usage=(1000, 200)),
                      tool_call("write_notes", {"text": NOTES}, usage=(1000, 200)),
                      tool_call("submit_experiment", change, usage=(1000, 200)))
        llm = LLMProposer(conversation_factory("anthropic:claude-opus-4-5"), workspace.dir, PriceTable(),
                          retry_base_s=0.01)
        hybrid = HybridProposer(llm, OptunaProposer(workspace.dir / "optuna.journal", seed=1), 0.5)
        # Proposed after each result (not ahead of it), so the LLM's proposal owes the lesson of Optuna's.
        run_loop(workspace, hybrid, LocalRunner(), LoopSettings(max_experiments=3, overlap=False, counted_seeds=True),
                 say=lambda _: None)
    confirm(workspace)
    index = write_report(workspace)
    return workspace, index, index.read_text()


def test_report_shows_every_experiment_kept_diff_and_transcript(reported):
    workspace, index, html = reported
    records = read_records(workspace.dir)
    assert [r.status == "noise" for r in records] == [False, True, False, False]
    assert (index.parent / "progress.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for r in records:
        assert f"id='t-{r.id}'" in html and f"href='#t-{r.id}'" in html
        for event in (workspace.dir / r.transcript).read_text().splitlines():
            if json.loads(event)["type"] == "tool_call":
                assert f"<b>{json.loads(event)['name']}</b>" in html
    for r in records[1:]:
        if r.status == "keep":
            added = next(line for line in r.diff.splitlines() if line.startswith("+") and "=" in line)
            assert added.split("#")[0].strip()[1:].strip() in re.sub(r"<[^>]+>", "", html)
    assert "Try a shorter warm-down." in html and "<script>" not in html and "onerror=alert" not in html.replace(
        "onerror=alert(1)&gt;", "")
    assert "&lt;script&gt;alert" in html
    # the harness's events read as sentences, their JSON behind a toggle
    assert "<b>run finished</b>" in html and "seed 42: ok (val_bpb " in html and "<summary>JSON</summary>" in html
    assert "<b>noise floor</b>" in html and "sigma " in html
    assert "src=\"data:image/png;base64," in html and "http://" not in html and "https://" not in html


def test_headline_numbers_match_an_independent_count(reported):
    workspace, _, html = reported
    records = [json.loads(line) for line in (workspace.dir / "experiments.jsonl").read_text().splitlines()]
    floor = next(r for r in records if r["status"] == "noise")
    experiments = [r for r in records if r["status"] != "noise"]
    baseline = sum(floor["values"]) / len(floor["values"])  # every run of the baseline commit
    best_record = [r for r in experiments if r["status"] == "keep"][-1]
    best = baseline if best_record is experiments[0] else best_record["val_bpb"]
    proposed = experiments[1:]
    keep_rate = round(100 * sum(r["status"] == "keep" for r in proposed) / len(proposed))
    start = time.mktime(time.strptime(records[0]["started"], "%Y-%m-%dT%H:%M:%S%z"))
    end = time.mktime(time.strptime(records[-1]["finished"], "%Y-%m-%dT%H:%M:%S%z"))
    duty = round(100 * sum(run["training_seconds"] for r in records for run in r["runs"]) / (end - start))
    tokens = sum(r.get("llm", {}).get("input_tokens", 0) + r.get("llm", {}).get("output_tokens", 0) for r in records)
    cost = sum(r.get("llm", {}).get("cost_usd", 0.0) for r in records)
    cards = dict(re.findall(r"<div class='card'><b>(.*?)</b><span>(.*?)</span>", html))
    flipped = {label: value for value, label in cards.items()}
    gain = 100 * (baseline - best) / baseline
    assert cards[f"{baseline:.6f} → {best:.6f}"].startswith(f"val_bpb, baseline → best ({gain:.2f}%")
    assert flipped["experiments"] == "3"
    assert flipped[f"keep rate ({sum(r['status'] == 'keep' for r in proposed)} kept besides the baseline)"] == (
        f"{keep_rate}%")
    assert flipped["duty cycle (counted training seconds of all runs over the wall clock; start-up and evaluation "
                   "left out)"] == f"{duty}%"
    assert flipped["LLM tokens / cost"] == f"{tokens:,} / ${cost:.2f}" and tokens == 3600  # 3 calls
    assert cards[f"{floor['sigma']:.6f}"].startswith("sigma of val_bpb between seeds")


def test_noise_floor_and_holdout_confirmation_are_shown(reported):
    workspace, _, html = reported
    confirmation = json.loads((workspace.dir / "confirmation.json").read_text())
    text = re.sub(r"<[^>]+>", " ", html)
    floor = next(r for r in read_records(workspace.dir) if r.status == "noise")
    assert all(f"{v:.6f}" in text for v in floor.values)
    assert f"{confirmation['holdout_gain']:+.6f}" in text and f"{confirmation['search_gain']:+.6f}" in text
    assert f"{confirmation['best']['holdout']:.6f}" in text


def test_the_page_works_in_a_real_browser(reported, tmp_path):
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (`make test` installs it as root with apt-get)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")
    _, index, _ = reported
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1280, "height": 1600})
        problems = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(index.as_uri())
        assert page.evaluate("document.querySelector('img.plot').naturalWidth") > 500
        transcript = page.locator("details#t-0001")
        assert transcript.evaluate("d => d.open") is False
        page.click("details#t-0001 > summary")
        assert transcript.evaluate("d => d.open") is True
        page.click("details#t-0001 > summary")
        assert transcript.evaluate("d => d.open") is False
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert problems == []
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 50_000


def minimal_record(i, status, val, triage="ok"):
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(1_700_000_000 + 60 * i))
    return {"id": f"{i:04d}", "commit": "0" * 40, "status": status, "val_bpb": val, "triage": triage,
            "description": "baseline" if i == 0 else f"change {i}", "proposer": "baseline" if i == 0 else "optuna",
            "started": stamp, "finished": stamp, "summary": {}, "llm": {}, "transcript": f"transcripts/{i:04d}.jsonl",
            "program": {"name": "program"}, "reason": "", "diff": ""}


@pytest.mark.parametrize("case", ["only a baseline", "only crashes", "torn last line"])
def test_edge_ledgers_render(test_track, tmp_path, case):
    workspace = Workspace.create("edge", test_track.spec, ROOT / "prompts" / "program.md", root=tmp_path)
    commit = workspace.head()
    if case == "only a baseline":
        records = [dict(minimal_record(0, "keep", 2.5), commit=commit)]
    elif case == "only crashes":
        records = [minimal_record(0, "crash", None, "infra"), minimal_record(1, "interrupted", None, "interrupted")]
    else:
        records = [dict(minimal_record(0, "keep", 2.5), commit=commit), minimal_record(1, "discard", 2.6)]
    text = "".join(json.dumps(r) + "\n" for r in records)
    if case == "torn last line":
        text += '{"id": "0002", "status": "ke'
        (workspace.dir / "transcripts").mkdir()
        (workspace.dir / "transcripts" / "0001.jsonl").write_text('{"v": 1, "type": "decision", "status": "disc')
    (workspace.dir / "experiments.jsonl").write_text(text)
    html = write_report(workspace).read_text()
    assert all(f"id='t-{r['id']}'" in html for r in records) and "t-0002" not in html
    result = subprocess.run([sys.executable, "-m", "agent.cli", "report", "--tag", "edge", "--workspaces",
                             str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


# Statuses beyond those the report was first written for (e.g. superseded: a change that no longer applied to a
# best that moved while it ran) must render as what they are, in the report and in `status`.
LATER_STATUSES = [s.value for s in ExperimentStatus
                  if s.value not in {"keep", "discard", "crash", "interrupted", "noise"}]


@pytest.mark.parametrize("status", LATER_STATUSES)
def test_a_status_added_later_renders(test_track, tmp_path, status):
    workspace = Workspace.create("later", test_track.spec, ROOT / "prompts" / "program.md", root=tmp_path)
    records = [dict(minimal_record(0, "keep", 2.5), commit=workspace.head()), minimal_record(1, status, 2.45),
               minimal_record(2, "discard", 2.6)]
    (workspace.dir / "experiments.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    html = write_report(workspace).read_text()
    assert f"<td class='{status}'>{status}</td>" in html
    printed = io.StringIO()
    Console(file=printed, width=300).print(status_view(workspace))
    assert re.search(rf"0001\s+│\s+{status}", printed.getvalue())


def test_comparison_of_two_tags(reported, test_track, tmp_path):
    workspace, _, _ = reported
    shutil.copytree(workspace.dir, tmp_path / "night")
    shutil.copytree(workspace.dir, tmp_path / "copy")
    result = subprocess.run([sys.executable, "-m", "agent.cli", "report", "--tag", "night", "--tag", "copy",
                             "--workspaces", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    compared = (tmp_path / "compare-night-copy" / "index.html").read_text()
    assert "<td>night</td>" in compared and "<td>copy</td>" in compared


def test_report_shows_hypotheses_lessons_and_the_notes(reported):
    workspace, _, html = reported
    optuna, llm = [r for r in read_records(workspace.dir) if r.proposer in ("optuna", "llm")]
    assert (optuna.proposer, llm.proposer) == ("optuna", "llm")  # the hybrid's share puts Optuna first
    assert optuna.hypothesis.startswith("TPE trial") and optuna.expected.startswith("val_bpb below")
    assert llm.lesson_for == optuna.id and llm.lesson
    learned = html.split("<h2>What we learned</h2>")[1].split("<h2>")[0]
    for text in (optuna.hypothesis, llm.hypothesis, llm.expected, llm.lesson):
        assert escape(text) in learned or escape(text) in html.split("<h2>Every experiment</h2>")[1]
    assert f"<b>lesson</b>: {escape(llm.lesson)}" in learned  # beside the experiment it is about
    assert escape(NOTES.strip()) in learned and "<b>dead end</b>" not in html


def test_the_report_names_the_machine_and_the_best_s_offset_from_its_calibrated_baseline(reported, tmp_path):
    workspace, _, html = reported
    here = this_machine()
    records = read_records(workspace.dir)
    assert [run.hardware for r in records for run in r.runs] == [here] * sum(len(r.runs) for r in records)
    assert escape(here.describe()) in html and "not calibrated" in html
    best = headline(records).best
    calibration = Calibration(track="test", data=workspace.track.fingerprint, hardware=here, profile="cpu",
                              seeds=[42, 43], val_bpb=[best + 0.1, best + 0.3], tokens_per_second=1000.0,
                              created="2026-12-05T07:00:00+0000")
    cached = calibration_path(cache_root(), "test", here)
    store_calibration(cached, calibration.model_copy(update={"data": "0" * 64}))  # another dataset's: not used
    try:
        assert "not calibrated" in write_report(workspace).read_text()
        store_calibration(cached, calibration)
        html = write_report(workspace).read_text()
        assert "-0.200000" in html and escape(calibration.describe()) in html
        assert read_calibration(workspace.dir / "calibration.json") == calibration  # the workspace keeps its copy
        printed = io.StringIO()
        Console(file=printed, width=300).print(status_view(workspace))
        assert f"hardware: {here.describe()}" in printed.getvalue()
        assert "the best is -0.200000 from it" in printed.getvalue()
        cached.unlink()  # read on another machine: the copy it kept still gives the offset
        compared = write_comparison([workspace], tmp_path / "compared").read_text()
        assert "-0.200000" in compared and escape(here.describe()) in compared
    finally:
        cached.unlink(missing_ok=True)
        (workspace.dir / "calibration.json").unlink(missing_ok=True)
