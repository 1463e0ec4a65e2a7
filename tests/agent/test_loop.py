"""The research loop end to end on the test track: real git, real CPU training."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.llm.types import Usage
from agent.loop import LoopSettings, LoopStopped, run_cost, run_loop
from agent.proposers.base import Proposal, Proposer
from agent.proposers.edits import Edit
from agent.proposers.optuna_search import OptunaProposer
from agent.recording.ledger import Ledger
from agent.recording.proposal_failures import read_failures
from agent.running.runner import LocalRunner
from agent.workspace import WorkspaceError
from tests.helpers.processes import interruptible, processes_under

ROOT = Path(__file__).resolve().parents[2]


class InvariantChecking(Proposer):
    """Wraps a proposer and checks, as each decided experiment is reported, that the workspace sits at the
    best commit with a clean tree (the new commit if kept, its parent otherwise)."""

    def __init__(self, inner, workspace):
        self.inner, self.workspace, self.name = inner, workspace, inner.name
        self.violations = []

    def propose(self, context, transcript):
        return self.inner.propose(context, transcript)

    def observe(self, record):
        if record.status != "pending":
            expected = record.commit if record.status == "keep" else record.parent
            if self.workspace.head() != expected or not self.workspace.is_clean():
                self.violations.append(record.id)
        self.inner.observe(record)


class Scripted(Proposer):
    """Proposes the given edit lists in order."""

    name = "scripted"

    def __init__(self, *proposals):
        self.proposals = list(proposals)

    def propose(self, context, transcript):
        description, edits = self.proposals.pop(0)
        transcript.event("reasoning", text=f"scripted: {description}")
        return Proposal(description, edits)


def tsv_rows(workspace):
    lines = (workspace.dir / "results.tsv").read_text().splitlines()
    assert lines[0] == "commit\tval_bpb\tmemory_gb\tstatus\tdescription"
    return [line.split("\t") for line in lines[1:]]


def first_parent_history(workspace):
    return workspace.repo.git.rev_list("--first-parent", workspace.branch).split()


def test_baseline_then_three_optuna_experiments(workspace):
    proposer = InvariantChecking(OptunaProposer(workspace.dir / "optuna.journal", seed=3), workspace)
    why = run_loop(workspace, proposer, LocalRunner(), LoopSettings(max_experiments=4, noise_seeds=0),
                   say=lambda _: None)
    assert "ran 4 experiment(s)" in why
    records = Ledger(workspace.dir).records
    assert [r.id for r in records] == ["0000", "0001", "0002", "0003"]
    assert records[0].description == "baseline" and records[0].status == "keep"
    assert all(r.status in ("keep", "discard", "crash") for r in records)
    rows = tsv_rows(workspace)
    assert [(r.commit[:7], f"{r.val_bpb or 0:.6f}", r.status, r.description) for r in records] == \
        [(row[0], row[1], row[3], row[4]) for row in rows]
    assert proposer.violations == []
    kept = [r.commit for r in records if r.status == "keep"]
    assert first_parent_history(workspace)[::-1] == kept
    assert workspace.head() == kept[-1] and workspace.is_clean()
    best_bpb = records[0].val_bpb
    for r in records[1:]:
        added = [line for line in r.diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
        assert r.proposal["parameter"] in added[0] and len(added) == 1
        assert r.architecture["n_layer"] >= 1
        if r.status == "keep":
            assert r.val_bpb < best_bpb
            best_bpb = r.val_bpb
        else:
            assert workspace.repo.is_ancestor(r.commit, workspace.head()) is False
        events = [json.loads(line)["type"] for line in (workspace.dir / r.transcript).read_text().splitlines()]
        assert events[:3] == ["proposal_started", "reasoning", "proposal"] and events[-1] == "decision"
        assert (workspace.dir / r.log).exists()
    assert len([t for t in proposer.inner.trials() if t.state.name in ("COMPLETE", "FAIL")]) == 3
    shown = subprocess.run([sys.executable, "-m", "agent.cli", "status", "--tag", workspace.tag, "--workspaces",
                            str(workspace.dir.parent)], capture_output=True, text=True, cwd=ROOT)
    best = min(r.val_bpb for r in records if r.status == "keep")
    assert "4 experiments" in shown.stdout and f"best val_bpb {best:.6f}" in shown.stdout, shown.stdout


def test_crash_resets_to_the_best_and_rejected_edits_commit_nothing(workspace):
    crash = Edit("def main() -> None:\n", "def main() -> None:\n    raise RuntimeError('boom at start')\n")
    not_unique = Edit("torch", "pytorch")
    proposer = Scripted(("raise at start", [crash]), *[("ambiguous", [not_unique])] * 5)
    messages = []
    with pytest.raises(LoopStopped, match="the proposer failed 5 times in a row"):
        run_loop(workspace, proposer, LocalRunner(), LoopSettings(max_experiments=10, noise_seeds=0),
                 say=messages.append)
    records = Ledger(workspace.dir).records
    assert [r.status for r in records] == ["keep", "crash"]
    assert records[1].triage == "fixable" and "RuntimeError: boom at start" in records[1].reason
    assert "boom at start" in records[1].log_tail
    assert tsv_rows(workspace)[1][1:4] == ["0.000000", "0.0", "crash"]
    assert workspace.head() == records[0].commit and workspace.is_clean()
    assert len(first_parent_history(workspace)) == 1
    rejected = [json.loads(line) for line in (workspace.dir / "transcripts" / "0002.jsonl").read_text().splitlines()]
    assert rejected[-1]["type"] == "edit_rejected" and "matches" in rejected[-1]["message"]
    assert sum("proposal failed" in m for m in messages) == 5


def test_broken_data_is_retried_once_then_stops_the_loop(workspace, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(tmp_path / "no-data-here"))
    with pytest.raises(LoopStopped, match="failed twice for a reason outside the experiment"):
        run_loop(workspace, Scripted(), LocalRunner(), LoopSettings(max_experiments=3), say=lambda _: None)
    records = Ledger(workspace.dir).records
    assert len(records) == 1 and records[0].triage == "infra" and records[0].status == "crash"
    assert (workspace.dir / "logs" / "0000.log").exists() and (workspace.dir / "logs" / "0000.retry.log").exists()
    assert workspace.is_clean()


def test_a_second_loop_on_the_same_tag_is_refused(workspace):
    with workspace.lock():
        with pytest.raises(WorkspaceError, match="is in use by pid"):
            run_loop(workspace, Scripted(), LocalRunner(), LoopSettings(max_experiments=1), say=lambda _: None)


def start_cli_run(workspace, test_track, *extra):
    env = dict(os.environ, AUTORESEARCH_CACHE=str(test_track.directory.parent))
    command = [sys.executable, "-m", "agent.cli", "run", "--tag", workspace.tag, "--workspaces",
               str(workspace.dir.parent), *extra]
    return subprocess.Popen(interruptible(command), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def wait_for_training(workspace, experiment_id, timeout=60):
    log = workspace.dir / "logs" / f"{experiment_id}.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if list((workspace.dir / "inflight").glob("*.json")) and log.exists() and "step 0000" in log.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"experiment {experiment_id} never started training")


def test_kill_9_during_training_then_resume(workspace, test_track):
    loop = start_cli_run(workspace, test_track, "--max-experiments", "3")
    wait_for_training(workspace, "0000")
    orphans = processes_under(workspace.runs_dir)
    assert orphans, "train.py should be running in the run directory"
    loop.send_signal(signal.SIGKILL)
    loop.wait(timeout=10)

    messages = []
    run_loop(workspace, Scripted(), LocalRunner(), LoopSettings(max_experiments=1), say=messages.append)
    assert processes_under(workspace.runs_dir) == []
    records = Ledger(workspace.dir).records
    assert [(r.id, r.status) for r in records] == [("0000", "interrupted"), ("0001", "keep")]
    assert [row[3] for row in tsv_rows(workspace)] == ["crash", "keep"]
    assert any("0000 was interrupted" in m for m in messages)
    assert (workspace.dir / "experiments.jsonl").read_bytes().endswith(b"\n")
    assert not list((workspace.dir / "inflight").glob("*.json")) and workspace.is_clean()

    run_loop(workspace, Scripted(), LocalRunner(), LoopSettings(max_experiments=0), say=lambda _: None)
    assert len(Ledger(workspace.dir).records) == 2


def test_ctrl_c_stops_cleanly_and_records_the_run_as_interrupted(workspace, test_track):
    loop = start_cli_run(workspace, test_track, "--max-experiments", "2")
    wait_for_training(workspace, "0000")
    loop.send_signal(signal.SIGINT)
    output, _ = loop.communicate(timeout=30)
    assert loop.returncode == 0, output
    assert "stopped by Ctrl-C" in output
    records = Ledger(workspace.dir).records
    assert [(r.id, r.status, r.triage) for r in records] == [("0000", "interrupted", "interrupted")]
    assert workspace.is_clean() and not list((workspace.dir / "inflight").glob("*.json"))
    assert processes_under(workspace.runs_dir) == []


class Paid(Scripted):
    """A scripted proposer whose every proposal cost $0.25 of LLM calls."""

    def propose(self, context, transcript):
        proposal = super().propose(context, transcript)
        proposal.usage = Usage(input_tokens=1_000, output_tokens=100, cost_usd=0.25, calls=1)
        return proposal


class InterruptsItsSecondRun(LocalRunner):
    """Ctrl-C (SIGINT to this process) once the experiment after the baseline has started training; its run does
    not return before the interrupt was sent, so the experiment is in flight when it lands, however fast it trained."""

    def run(self, workspace, job):
        if job.run.name != "0001":
            return super().run(workspace, job)
        sent = threading.Event()

        def interrupt() -> None:
            os.kill(os.getpid(), signal.SIGINT)
            sent.set()
        threading.Timer(1.0, interrupt).start()
        result = super().run(workspace, job)
        sent.wait(30)
        return result


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt, as Ctrl-C at a terminal does: a test run started as a background job
    inherits SIGINT ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_an_experiment_interrupted_while_it_trains_keeps_what_its_proposal_spent(workspace, test_track,
                                                                                 ctrl_c_raises):
    proposer = Paid(("warmdown 0.3", [Edit("WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.3")]))
    messages = []
    with pytest.raises(KeyboardInterrupt):
        # no proposal made ahead: the one scripted change is spent
        run_loop(workspace, proposer, InterruptsItsSecondRun(),
                 LoopSettings(max_experiments=3, noise_seeds=0, overlap=False), say=messages.append)
    records = Ledger(workspace.dir).records
    assert [(r.id, r.status) for r in records] == [("0000", "keep"), ("0001", "interrupted")], messages
    interrupted = records[1]
    assert (interrupted.llm.cost_usd, interrupted.llm.calls) == (0.25, 1)
    assert interrupted.description == "warmdown 0.3" and interrupted.commit != records[0].commit
    assert run_cost(Ledger(workspace.dir)) == pytest.approx(0.25)  # what --max-cost-usd counts
    written = json.loads((workspace.dir / "experiments.jsonl").read_text().splitlines()[1])
    assert written["llm"]["cost_usd"] == 0.25 and written["status"] == "interrupted"


def test_a_proposal_refused_after_it_was_paid_for_counts_towards_the_cost_cap(workspace, test_track):
    proposer = Paid(("an edit that applies nowhere", [Edit("NO SUCH LINE", "x = 1")]),
                    ("warmdown 0.3", [Edit("WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.3")]))
    run_loop(workspace, proposer, LocalRunner(), LoopSettings(max_experiments=2, noise_seeds=0), say=lambda _: None)
    failed, = read_failures(workspace.dir)
    assert failed.kind == "failed" and "old_string was not found" in failed.reason and failed.usage.cost_usd == 0.25
    assert run_cost(Ledger(workspace.dir)) == pytest.approx(0.5)  # the refused proposal and the one that ran


def test_a_night_whose_key_is_revoked_stops_with_its_report_written(workspace, test_track):
    """The key the preflight accepted is refused at the first proposal (revoked at 3 a.m.): the night stops in one
    line, and the report of what it did until then is there for the morning."""
    from tests.helpers.llm_server import LLMServer, error, text
    with LLMServer() as server:
        server.script(text("ready"), *[error(401)] * 10)
        env = dict(os.environ, AUTORESEARCH_CACHE=str(test_track.directory.parent), ANTHROPIC_API_KEY="sk-ant-test",
                   ANTHROPIC_BASE_URL=server.anthropic_base_url())
        ran = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--tag", workspace.tag, "--workspaces",
                              str(workspace.dir.parent), "--model", "anthropic:claude-opus-5-5", "--noise-seeds", "0",
                              "--max-experiments", "3"], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=600)
    said = ran.stdout + ran.stderr
    assert ran.returncode == 2 and "rejected the API key (401" in said, said
    report = workspace.dir / "report" / "index.html"
    assert f"report: {report}" in said.replace("\n", "") and report.is_file()
    assert "baseline" in report.read_text()
    assert "Traceback" not in said
