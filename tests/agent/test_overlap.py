"""Proposing the next experiment while the current one trains: re-based when the best moved, proposed
again when it no longer applies, never trained twice or lost; through the loopback LLM server."""

import json

from agent.llm.pricing import PriceTable
from agent.llm.select import conversation_factory
from agent.loop import LoopSettings, run_loop
from agent.proposers.llm import LLMProposer
from agent.recording.ledger import Ledger
from agent.running.runner import LocalRunner
from tests.helpers.llm_server import LLMServer, tool_call
from tests.helpers.submissions import reasoned
from trainer.tracks.hyperparameters import set_hyperparameters

MATRIX = "MATRIX_LR = 0.0            # times sqrt(max(1, rows / cols))"
WARMDOWN = "WARMDOWN_RATIO = 0.5       # linear decay over the last half"


def submit(description, old, new):
    return tool_call("submit_experiment", reasoned({"description": description,
                                                    "edits": [{"old_string": old, "new_string": new}]}))


def events(workspace, experiment_id):
    path = workspace.dir / "transcripts" / f"{experiment_id}.jsonl"
    return [json.loads(line)["type"] for line in path.read_text().splitlines()]


def test_proposals_made_during_a_run_are_rebased_or_proposed_again(workspace, monkeypatch):
    # A baseline whose block matrices cannot learn, so that restoring their learning rate is surely kept.
    handicapped = set_hyperparameters(workspace.file_at("train.py"), {"MATRIX_LR": 0.0})
    assert MATRIX in handicapped
    workspace.advance_to(workspace.commit_train(handicapped, "baseline with MATRIX_LR = 0"))
    with LLMServer(latency=1.0) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url())
        server.script(
            submit("MATRIX_LR 0.0 -> 0.04", MATRIX, MATRIX.replace("0.0 ", "0.04")),              # 0001, serial
            submit("MATRIX_LR 0.0 -> 0.02", MATRIX, MATRIX.replace("0.0 ", "0.02")),              # 0002, ahead
            submit("FINAL_LR_FRAC 0.0 -> 0.05", "FINAL_LR_FRAC = 0.0", "FINAL_LR_FRAC = 0.05"),   # 0002, again
            submit("WARMDOWN_RATIO 0.5 -> 0.4", WARMDOWN, WARMDOWN.replace("0.5 ", "0.4 ")))      # 0003, ahead
        proposer = LLMProposer(conversation_factory("anthropic:claude-opus-4-5"), workspace.dir, PriceTable(),
                               retry_base_s=0.01, outage_window_s=10)
        run_loop(workspace, proposer, LocalRunner(), LoopSettings(max_experiments=4, noise_seeds=0),
                 say=lambda _: None)
        assert server.pending == 0 and len(server.requests) == 4
    base, first, second, third = Ledger(workspace.dir).records
    assert first.status == "keep" and first.val_bpb < base.val_bpb - 0.02
    assert first.proposed_against == base.commit and not first.rebased

    assert "rebase_failed" in events(workspace, "0002")
    assert second.description == "FINAL_LR_FRAC 0.0 -> 0.05"
    assert second.parent == first.commit and second.proposed_against == first.commit
    assert not second.rebased

    assert third.description == "WARMDOWN_RATIO 0.5 -> 0.4"
    assert third.proposed_against == first.commit
    assert third.parent == (second.commit if second.status == "keep" else first.commit)
    assert third.rebased == (second.status == "keep")
    trained = workspace.repo.commit(third.commit).tree["train.py"].data_stream.read().decode()
    assert "MATRIX_LR = 0.04" in trained and "WARMDOWN_RATIO = 0.4" in trained
    assert ("FINAL_LR_FRAC = 0.05" in trained) == (second.status == "keep")
    assert third.timings.propose_s >= 1.0 and third.timings.wait_s < 0.5
    assert "proposal_started" in events(workspace, "0003")[:1]

    runs = sorted(p.name for p in (workspace.dir / "logs").iterdir() if not p.name.startswith("verify-"))
    assert runs == ["0000.log", "0001.log", "0002.log", "0003.log"]  # each experiment trained once
    history = workspace.repo.git.rev_list("--first-parent", workspace.branch).split()[::-1]
    kept = [r.commit for r in (base, first, second, third) if r.status == "keep"]
    assert history[-len(kept):] == kept and workspace.is_clean()


def test_without_overlap_the_proposal_waits_for_the_result(workspace, monkeypatch):
    with LLMServer(latency=1.0) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url())
        server.script(submit("WARMDOWN_RATIO 0.5 -> 0.4", WARMDOWN, WARMDOWN.replace("0.5 ", "0.4 ")),
                      submit("FINAL_LR_FRAC 0.0 -> 0.05", "FINAL_LR_FRAC = 0.0", "FINAL_LR_FRAC = 0.05"))
        proposer = LLMProposer(conversation_factory("anthropic:claude-opus-4-5"), workspace.dir, PriceTable(),
                               retry_base_s=0.01, outage_window_s=10)
        run_loop(workspace, proposer, LocalRunner(), LoopSettings(max_experiments=3, overlap=False, noise_seeds=0),
                 say=lambda _: None)
    records = Ledger(workspace.dir).records
    assert all(r.timings.wait_s >= 1.0 for r in records[1:])
    assert all(not r.rebased and r.proposed_against == r.parent for r in records[1:])
