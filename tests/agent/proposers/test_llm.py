"""The LLM proposer end to end on the test track, through the real anthropic and openai SDKs
talking HTTP to a loopback server that replays scripted turns."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.llm.models import MODELS as TABLE
from agent.llm.pricing import PriceTable
from agent.llm.select import conversation_factory, parse_model
from agent.loop import LoopSettings, LoopStopped, run_cost, run_loop
from agent.proposers.base import ProposerError
from agent.proposers.hybrid import HybridProposer
from agent.proposers.llm import LLMProposer
from agent.proposers.optuna_search import OptunaProposer
from agent.proposers.proposing import Proposing, read_program
from agent.proposers.toolbox import ToolBox
from agent.recording.ledger import Ledger
from agent.recording.proposal_failures import read_failures
from agent.recording.record import ExperimentStatus
from agent.recording.transcript import Transcript
from agent.running.runner import LocalRunner
from agent.workspace import Workspace
from tests.helpers.llm_server import (
    cut_tool_call,
    dropped_connection,
    error,
    refusal,
    serving_both_apis,
    stream_ended_early,
    stream_error,
    tool_call,
    tool_calls,
)
from tests.helpers.submissions import reasoned

ROOT = Path(__file__).resolve().parents[3]
WARMDOWN = "WARMDOWN_RATIO = 0.5       # linear decay over the last half"
CHANGE = reasoned({"description": "WARMDOWN_RATIO 0.5 -> 0.4",
                   "edits": [{"old_string": WARMDOWN, "new_string": WARMDOWN.replace("0.5 ", "0.4 ")}]})
MODELS = {"anthropic": "anthropic:claude-opus-4-5", "opus": "anthropic:claude-opus-4-8", "openai": "openai:gpt-5.6",
          "compatible": "openai-compatible:qwen3-coder"}


@pytest.fixture(scope="module")
def baseline_workspace(test_track, tmp_path_factory):
    """A workspace whose baseline has run; each test works on a copy of it."""
    program = tmp_path_factory.mktemp("program") / "program.md"
    shutil.copy(ROOT / "prompts" / "program.md", program)
    workspace = Workspace.create("llm", test_track.spec, program, root=tmp_path_factory.mktemp("workspaces"))
    run_loop(workspace, OptunaProposer(workspace.dir / "optuna.journal"), LocalRunner(),
             LoopSettings(max_experiments=1), say=lambda _: None)
    return workspace


@pytest.fixture
def workspace(baseline_workspace, tmp_path):
    shutil.copytree(baseline_workspace.dir, tmp_path / "llm", symlinks=True)
    return Workspace(tmp_path / "llm")


@pytest.fixture
def server(monkeypatch):
    with serving_both_apis(monkeypatch) as server:
        yield server


def llm_proposer(workspace, provider="anthropic", **options):
    options.setdefault("outage_window_s", 10.0)  # an unscripted request fails the test, not hangs it
    return LLMProposer(conversation_factory(MODELS[provider], cache_key="llm"), workspace.dir, PriceTable(),
                       retry_base_s=0.01, **options)


def loop(workspace, proposer, experiments=1, **settings):
    messages = []
    settings = {"noise_seeds": 0, **settings}
    why = run_loop(workspace, proposer, LocalRunner(), LoopSettings(max_experiments=experiments, **settings),
                   say=messages.append)
    return why, messages


def events(workspace, experiment_id):
    path = workspace.dir / "transcripts" / f"{experiment_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("provider", ["anthropic", "opus", "openai", "compatible"])
def test_reads_train_py_then_submits_a_change(workspace, server, provider):
    server.script(tool_call("read_file", {"path": "train.py"}, thinking="First I read the schedule."),
                  tool_call("submit_experiment", CHANGE, text="Shorter warm-down."))
    loop(workspace, llm_proposer(workspace, provider))
    record = Ledger(workspace.dir).records[-1]
    assert record.id == "0001" and record.status in ("keep", "discard")
    assert record.description == CHANGE["description"] and "+WARMDOWN_RATIO = 0.4" in record.diff
    assert record.proposer == "llm" and record.proposal["model"] == MODELS[provider].split(":")[1]
    assert record.llm.calls == 2 and record.llm.output_tokens == 400
    assert (record.llm.cost_usd > 0) is (provider != "compatible")  # a self-hosted model has no price
    kinds = [e["type"] for e in events(workspace, "0001")]
    assert kinds.count("tool_call") == 2 and kinds.count("tool_result") == 2 and kinds[-1] == "decision"
    thoughts = [e["text"] for e in events(workspace, "0001") if e["type"] == "thinking"]
    assert thoughts == ["First I read the schedule."]
    replies = [e for e in events(workspace, "0001") if e["type"] == "assistant"]
    assert all(r["request_id"].startswith("req_") and r["service_model"] for r in replies)
    assert "sk-" not in json.dumps(events(workspace, "0001"))
    read = next(e for e in events(workspace, "0001") if e["type"] == "tool_result")
    assert "# === HYPERPARAMETERS (track: test)" in read["content"]
    assert server.refusals == []
    first = server.requests[0].body
    system = {"anthropic": lambda: first["system"][0]["text"], "opus": lambda: first["system"][0]["text"],
              "openai": lambda: first["instructions"],
              "compatible": lambda: first["messages"][0]["content"]}[provider]()
    assert "Research program" in system and "Fixed rules of this service" in system
    tools = {t["function"]["name"] if provider == "compatible" else t["name"] for t in first["tools"]}
    assert tools == {"read_file", "list_experiments", "read_run_log", "show_diff", "write_notes", "submit_experiment"}
    second = server.requests[1].body
    if provider in ("anthropic", "opus"):
        # Opus 4.5 caches nothing under 4096 tokens: the system prompt alone is not marked, train.py after it is
        assert ("cache_control" in first["system"][0]) is (provider == "opus")
        assert first["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
        assert second["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
        assert second["messages"][1]["content"][0]["type"] == "thinking"  # sent back, signature included
        assert server.requests[1].usage["cache_read_input_tokens"] > 0  # the system prompt and tools were read
        thinking = {"anthropic": {"type": "enabled", "budget_tokens": 4000},
                    "opus": {"type": "adaptive", "display": "summarized"}}[provider]
        assert first["thinking"] == thinking and "temperature" not in first
        assert replies[1]["usage"]["cache_read_tokens"] > 0 and replies[1]["params"]["stream"] is True
    elif provider == "openai":
        assert first["store"] is False and first["reasoning"]["summary"] == "auto"
        assert first["include"] == ["reasoning.encrypted_content"] and first["prompt_cache_key"] == "llm"
        assert [i.get("type", i.get("role")) for i in second["input"][1:]] == [
            "reasoning", "function_call", "function_call_output", "user"]  # the user turn: tool calls left
    else:
        assert "max_tokens" in first and "max_completion_tokens" not in first
    assert server.pending == 0
    shown = subprocess.run([sys.executable, "-m", "agent.cli", "transcript", "--tag", "llm", "0001",
                            "--workspaces", str(workspace.dir.parent)], capture_output=True, text=True, cwd=ROOT)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    for expected in ("tool call read_file", "tool call submit_experiment", "First I read the schedule", "decision"):
        assert expected in shown.stdout


def test_an_ambiguous_edit_is_reflected_then_fixed(workspace, server):
    ambiguous = reasoned({"description": "rename torch", "edits": [{"old_string": "torch", "new_string": "pytorch"}]})
    server.script(tool_call("submit_experiment", ambiguous), tool_call("submit_experiment", CHANGE))
    loop(workspace, llm_proposer(workspace))
    records = Ledger(workspace.dir).records
    assert len(records) == 2 and records[1].proposal["reflections"] == 1
    errors = [e for e in events(workspace, "0001") if e["type"] == "tool_result" and e["is_error"]]
    assert len(errors) == 1 and "matches" in errors[0]["content"] and "nothing was committed" in errors[0]["content"]
    resent = server.requests[1].body["messages"][-1]["content"][0]
    assert resent["type"] == "tool_result" and resent["is_error"] is True


def test_rate_limit_and_overload_are_retried(workspace, server):
    server.script(error(429, headers={"retry-after": "1"}), error(529), tool_call("submit_experiment", CHANGE))
    loop(workspace, llm_proposer(workspace))
    assert len(Ledger(workspace.dir).records) == 2
    retries = [e for e in events(workspace, "0001") if e["type"] == "retry"]
    assert [r["status"] for r in retries] == [429, 529]
    assert retries[0]["retry_after"] == 1.0 and retries[0]["wait_s"] == 1.0


def test_a_rejected_key_stops_the_loop_at_once(workspace, server):
    server.script(error(401))
    with pytest.raises(LoopStopped, match="rejected the API key .* set ANTHROPIC_API_KEY"):
        loop(workspace, llm_proposer(workspace), experiments=3)
    assert len(server.requests) == 1 and len(Ledger(workspace.dir).records) == 1
    assert workspace.is_clean() and len(workspace.repo.git.rev_list("HEAD").split()) == 1


def test_a_crash_is_fixed_and_trained_under_the_same_experiment(workspace, server):
    boom = "    raise RuntimeError('boom at start')\n"
    crash = reasoned({"description": "shorter warm-down", "edits": [
        CHANGE["edits"][0], {"old_string": "def main() -> None:\n", "new_string": "def main() -> None:\n" + boom}]})
    fix = reasoned({"description": "remove the stray raise", "edits": [{"old_string": boom, "new_string": ""}]})
    server.script(tool_call("submit_experiment", crash), tool_call("submit_experiment", fix))
    loop(workspace, llm_proposer(workspace))
    record = Ledger(workspace.dir).records[-1]
    assert record.id == "0001" and record.status in ("keep", "discard")
    assert len(record.fix_attempts) == 1 and record.fix_attempts[0].triage == "fixable"
    assert (workspace.dir / "logs" / "0001.log").exists() and (workspace.dir / "logs" / "0001.fix1.log").exists()
    assert "+WARMDOWN_RATIO = 0.4" in record.diff and "boom" not in record.diff
    last_request = json.dumps(server.requests[-1].body)
    assert "Your change crashed (fixable" in last_request and "boom at start" in last_request
    assert record.llm.calls == 2


def test_the_cost_cap_ends_the_run_after_the_experiment(workspace, server):
    expensive = tool_call("submit_experiment", CHANGE, usage=(400_000, 20_000))  # $2.50 on claude-opus-4-5
    server.script(expensive, tool_call("submit_experiment", CHANGE))
    why, _ = loop(workspace, llm_proposer(workspace), experiments=5, max_cost_usd=1.0)
    assert "reached the cost cap of $1.00 (spent $2.50)" in why
    records = Ledger(workspace.dir).records
    assert len(records) == 2 and records[1].llm.cost_usd == pytest.approx(2.5)
    assert server.pending == 1


def test_a_changed_program_steers_the_next_experiment(workspace, server):
    final_lr = "FINAL_LR_FRAC = 0.0"
    other_change = reasoned({"description": "FINAL_LR_FRAC 0.0 -> 0.05",
                             "edits": [{"old_string": final_lr, "new_string": "FINAL_LR_FRAC = 0.05"}]})
    server.script(tool_call("submit_experiment", CHANGE), tool_call("submit_experiment", other_change))
    loop(workspace, llm_proposer(workspace))
    other = workspace.dir.parent / "simplify.md"
    shutil.copy(ROOT / "prompts" / "simplify.md", other)
    steered = subprocess.run([sys.executable, "-m", "agent.cli", "steer", "--tag", "llm", str(other),
                              "--workspaces", str(workspace.dir.parent)], capture_output=True, text=True, cwd=ROOT)
    assert steered.returncode == 0, steered.stdout + steered.stderr
    loop(workspace, llm_proposer(workspace))
    first, second = Ledger(workspace.dir).records[1:]
    assert (first.program.name, second.program.name) == ("program", "simplify")
    assert first.program.sha256 != second.program.sha256
    systems = [r.body["system"][0]["text"] for r in server.requests]
    assert (ROOT / "prompts" / "simplify.md").read_text().strip()[:200] in systems[1]


def test_an_outage_pauses_without_charging_an_experiment(workspace, server):
    server.script(*[error(503)] * 4, tool_call("submit_experiment", CHANGE))
    proposer = llm_proposer(workspace, outage_window_s=0.05)
    _, messages = loop(workspace, proposer, outage_poll_seconds=0.01)
    assert len(Ledger(workspace.dir).records) == 2
    assert any(m.startswith("paused:") and "nothing was charged" in m for m in messages)
    assert server.pending == 0


def test_hybrid_shares_experiments_between_optuna_and_the_llm(workspace, server):
    clamp = reasoned({"description": "clamp the warm-down at 0", "edits": [  # code: Optuna owns the values
        {"old_string": "    remaining = (1 - progress) / WARMDOWN_RATIO",
         "new_string": "    remaining = max(0.0, (1 - progress) / WARMDOWN_RATIO)"}]})
    server.script(tool_call("submit_experiment", clamp))
    hybrid = HybridProposer(llm_proposer(workspace), OptunaProposer(workspace.dir / "optuna.journal"), 0.5)
    loop(workspace, hybrid, experiments=2)
    proposers = [r.proposer for r in Ledger(workspace.dir).records[1:]]
    assert sorted(proposers) == ["llm", "optuna"] and server.pending == 0


def test_a_missing_key_or_model_is_a_clear_error(workspace, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    result = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--tag", "llm", "--proposer", "llm",
                             "--model", "anthropic:claude-opus-4-5", "--workspaces", str(workspace.dir.parent)],
                            capture_output=True, text=True, cwd=ROOT, env=dict(os.environ))
    assert result.returncode == 2 and "set ANTHROPIC_API_KEY" in result.stdout
    bad = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--tag", "llm", "--proposer", "llm",
                          "--workspaces", str(workspace.dir.parent)], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "needs --model PROVIDER:MODEL" in bad.stdout


def test_malformed_tool_calls_and_a_one_off_400_cost_at_most_one_proposal(workspace, server):
    """gpt-5.6 on the Responses API: three malformed calls come back as tool errors the model acts on; a 400
    while the next experiment is proposed fails that proposal only (recorded, with its spend) and the night
    goes on."""
    server.script(tool_calls([("read_file", {"path": 7}), ("rm_rf", {"path": "/"})], thinking="Let me look."),
                  tool_call("list_experiments", "{limit: ten"),
                  tool_call("submit_experiment", CHANGE),
                  error(400, body={"error": {"message": "Invalid 'input[3]': bad", "type": "invalid_request_error",
                                             "param": "input", "code": None}}),
                  tool_call("submit_experiment", reasoned({"description": "FINAL_LR_FRAC 0.0 -> 0.05", "edits": [
                      {"old_string": "FINAL_LR_FRAC = 0.0", "new_string": "FINAL_LR_FRAC = 0.05"}]})))
    why, messages = loop(workspace, llm_proposer(workspace, "openai"), experiments=2)
    assert why.startswith("ran 2 experiment(s)") and server.pending == 0 and server.refusals == []
    records = Ledger(workspace.dir).records
    assert [r.id for r in records] == ["0000", "0001", "0002"]
    assert records[2].description == "FINAL_LR_FRAC 0.0 -> 0.05"
    errors = [e["content"] for e in events(workspace, "0001") if e["type"] == "tool_result" and e["is_error"]]
    assert len(errors) == 3
    assert "invalid arguments for read_file: path: Input should be 'train.py'" in errors[0]
    assert "there is no tool 'rm_rf'" in errors[1] and "not a JSON object" in errors[2]
    outputs = [i["output"] for i in server.requests[1].body["input"] if i.get("type") == "function_call_output"]
    assert outputs[0].startswith("ERROR: invalid arguments") and len(outputs) == 2
    failed = read_failures(workspace.dir)
    assert [(f.experiment_id, f.kind, f.in_a_row) for f in failed] == [("0002", "failed", 1)]
    assert "refused the request (400" in failed[0].reason and failed[0].usage.calls == 0
    assert any(m.startswith("proposal failed (1 in a row)") for m in messages)
    shown = subprocess.run([sys.executable, "-m", "agent.cli", "status", "--tag", "llm",
                            "--workspaces", str(workspace.dir.parent)], capture_output=True, text=True, cwd=ROOT)
    assert "proposals without an experiment: 1" in shown.stdout, shown.stdout + shown.stderr


def test_failed_proposals_spend_counts_towards_the_cap(workspace, server):
    """A proposal that reads (and pays) but never submits, five times over, stops the night with the reason;
    the spend of the failed proposals is the run's spend."""
    server.script(*[tool_call("read_file", {"path": "train.py"}, usage=(100_000, 1000))] * 5)
    with pytest.raises(LoopStopped, match="failed 5 times in a row; last error: no valid submit_experiment"):
        loop(workspace, llm_proposer(workspace, max_tool_calls=1), experiments=3)
    failed = read_failures(workspace.dir)
    assert len(failed) == 5 and all(f.usage.calls == 1 for f in failed)
    assert sum(f.usage.cost_usd for f in failed) == pytest.approx(5 * (0.5 + 0.025))  # Opus 4.5: $5 in, $25 out
    assert run_cost(Ledger(workspace.dir)) == pytest.approx(5 * 0.525)


def propose(workspace, proposer, tmp_path):
    """One proposal without training anything; returns it (or raises) and the transcript's events."""
    ledger = Ledger(workspace.dir)
    context = Proposing(workspace, ledger, proposer).context(f"{len(ledger.records):04d}", ledger.best(),
                                                             read_program(workspace), workspace.file_at("train.py"))
    transcript = Transcript(tmp_path / "proposal.jsonl")
    try:
        return proposer.propose(context, transcript), transcript.events()
    except ProposerError as err:
        return err, transcript.events()


def test_a_context_too_long_is_retried_once_with_old_tool_results_cut(workspace, server, tmp_path):
    too_long = {"type": "error", "error": {"type": "invalid_request_error",
                                           "message": "prompt is too long: 1000123 tokens > 1000000 maximum"}}
    server.script(tool_call("read_file", {"path": "train.py"}), tool_call("read_file", {"path": "prepare.py"}),
                  error(400, body=too_long), tool_call("submit_experiment", CHANGE))
    proposal, seen = propose(workspace, llm_proposer(workspace, "opus"), tmp_path)
    assert proposal.description == CHANGE["description"] and server.pending == 0
    retried = server.requests[-1].body["messages"]
    assert retried[2]["content"][0]["content"] == "[cut to fit the context window]"
    assert "evaluate_bpb" in retried[4]["content"][0]["content"]  # the newest result (prepare.py) is kept
    assert [e["trimmed"] for e in seen if e["type"] == "refused"] == [False]


def test_the_model_is_told_the_calls_left_and_the_proposal_ends_at_the_limit(workspace, server, tmp_path):
    server.script(*[tool_call("show_diff", {"experiment_id": "0000"})] * 3)
    err, _ = propose(workspace, llm_proposer(workspace, "opus", max_tool_calls=3), tmp_path)
    assert isinstance(err, ProposerError) and "within 3 tool calls" in str(err) and err.usage.calls == 3
    notes = [r.body["messages"][-1]["content"][-1]["text"] for r in server.requests[1:]]
    assert notes == ["2 tool calls left.", "This is your last tool call: call submit_experiment now with your best "
                                           "change."]


def test_a_proposal_over_its_token_budget_fails_with_its_spend(workspace, server, tmp_path):
    server.script(*[tool_call("read_file", {"path": "train.py"}, usage=(60_000, 1_000))] * 2)
    err, _ = propose(workspace, llm_proposer(workspace, "opus", max_proposal_tokens=100_000), tmp_path)
    assert isinstance(err, ProposerError) and "over its budget of 100,000" in str(err)
    assert err.usage.calls == 2 and err.usage.cost_usd == pytest.approx(2 * (0.3 + 0.025))


def test_a_cost_cap_needs_a_price_for_the_model(workspace):
    command = [sys.executable, "-m", "agent.cli", "run", "--tag", "llm", "--proposer", "llm", "--model",
               "openai-compatible:my-llama", "--base-url", "http://127.0.0.1:9/v1", "--max-cost-usd", "5",
               "--max-experiments", "1", "--workspaces", str(workspace.dir.parent)]
    refused = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 2 and "not in the model table" in refused.stdout
    assert "--max-cost-usd cannot be enforced: openai-compatible:my-llama has no price" in refused.stdout


@pytest.mark.parametrize("provider", ["anthropic", "openai", "compatible"])
def test_every_call_is_validated_by_its_argument_model_through_each_sdk(workspace, server, tmp_path, provider):
    """A missing field, a wrong type, an unknown field and an unknown tool each come back as a tool error that
    says what to fix; the proposal goes on and ends with the valid submission, checked once."""
    server.script(tool_calls([("submit_experiment", {"description": "no edits given", "hypothesis": "h",
                                                      "expected": "e"}),
                              ("list_experiments", {"limit": "many"}),
                              ("show_diff", {"experiment_id": "0000", "colour": True}),
                              ("delete_experiment", {"experiment_id": "0000"})]),
                  tool_call("submit_experiment", CHANGE))
    proposal, seen = propose(workspace, llm_proposer(workspace, provider), tmp_path)
    assert not isinstance(proposal, Exception), proposal
    errors = [e["content"] for e in seen if e["type"] == "tool_result" and e["is_error"]]
    assert len(errors) == 4 and server.pending == 0
    assert "invalid arguments for submit_experiment: edits: Field required" in errors[0]
    assert "nothing was committed" in errors[0]
    assert "invalid arguments for list_experiments: limit: Input should be a valid integer" in errors[1]
    assert "invalid arguments for show_diff: colour: Extra inputs are not permitted" in errors[2]
    assert "there is no tool 'delete_experiment'" in errors[3] and "submit_experiment" in errors[3]
    assert all("Call it again with corrected arguments" in e for e in errors[:3])
    assert proposal.description == CHANGE["description"] and proposal.meta["reflections"] == 1
    assert proposal.applied_to == workspace.file_at("train.py") and "WARMDOWN_RATIO = 0.4" in proposal.source


FINAL_LR = reasoned({"description": "FINAL_LR_FRAC 0.0 -> 0.05", "edits": [
    {"old_string": "FINAL_LR_FRAC = 0.0", "new_string": "FINAL_LR_FRAC = 0.05"}]})


def test_a_night_of_provider_faults_runs_every_experiment_it_was_asked_for(workspace, server):
    """An overload error after the 200, a connection closed mid-stream, a tool call cut at max_tokens and a
    refusal: each costs at most its proposal, never the night or the runs in flight."""
    server.script(stream_error("overloaded_error"), tool_call("submit_experiment", CHANGE),
                  refusal("I won't help with that."),
                  dropped_connection(), cut_tool_call("submit_experiment", FINAL_LR),
                  tool_call("submit_experiment", FINAL_LR))
    why, messages = loop(workspace, llm_proposer(workspace), experiments=2)
    assert why.startswith("ran 2 experiment(s)"), (why, messages)
    records = Ledger(workspace.dir).records
    assert [r.description for r in records[1:]] == [CHANGE["description"], FINAL_LR["description"]]
    assert server.pending == 0 and server.refusals == []
    first = [e for e in events(workspace, "0001") if e["type"] == "retry"]
    assert len(first) == 1 and first[0]["status"] == 200 and "overloaded" in first[0]["error"]
    second = events(workspace, records[2].id)  # the refused proposal took 0002
    assert [e["error"].split(":")[0] for e in second if e["type"] == "retry"] == ["APIConnectionError"]
    cut = [e["content"] for e in second if e["type"] == "tool_result" and e["is_error"]]
    assert len(cut) == 1 and "cut at the output limit" in cut[0]  # never run with its partial arguments
    failed = read_failures(workspace.dir)
    assert len(failed) == 1 and "declined" in failed[0].reason and failed[0].usage.calls == 1
    assert failed[0].usage.cost_usd > 0


def test_a_stream_error_the_service_calls_permanent_fails_only_the_proposal(workspace, server, tmp_path):
    server.script(stream_error("invalid_request_error"))
    err, seen = propose(workspace, llm_proposer(workspace, "opus"), tmp_path)
    assert isinstance(err, ProposerError) and "invalid_request_error" in str(err)
    assert len(server.requests) == 1  # not retried


def test_anything_else_that_breaks_a_proposal_fails_it_with_its_spend(workspace, server, tmp_path, monkeypatch):
    """A fault no rule knows (here: the toolbox breaks while answering a read) fails that proposal with what it
    spent; the loop goes on (ProposerError, not a crash)."""
    server.script(tool_call("read_file", {"path": "train.py"}, usage=(10_000, 100)))

    def broken(self, call):
        raise RuntimeError("disk went away")

    monkeypatch.setattr(ToolBox, "run", broken)
    err, seen = propose(workspace, llm_proposer(workspace, "opus"), tmp_path)
    assert isinstance(err, ProposerError) and "RuntimeError: disk went away" in str(err)
    assert err.usage.calls == 1 and err.usage.cost_usd > 0
    assert any(e["type"] == "proposal_error" for e in seen)


def test_blank_text_is_never_sent_back(workspace, server, tmp_path):
    server.script(tool_call("read_file", {"path": "train.py"}, text="  \n "), tool_call("submit_experiment", CHANGE))
    proposal, _ = propose(workspace, llm_proposer(workspace, "opus"), tmp_path)
    assert proposal.description == CHANGE["description"] and server.refusals == []
    sent_back = server.requests[1].body["messages"][1]["content"]
    assert [b["type"] for b in sent_back] == ["tool_use"]


def test_a_forgotten_lesson_is_asked_for_once_then_the_change_goes_ahead(workspace, server, tmp_path):
    """An experiment was decided and no lesson of it exists: the first submission without one is reminded, the
    second goes through and its record says the lesson was not given."""
    without = {**CHANGE, "lesson": ""}
    server.script(tool_call("submit_experiment", without), tool_call("submit_experiment", without))
    proposer, ledger = llm_proposer(workspace, "opus"), Ledger(workspace.dir)
    context = Proposing(workspace, ledger, proposer).context("0002", ledger.best(), read_program(workspace),
                                                             workspace.file_at("train.py"))
    context.history.append(ledger.best().model_copy(update={"id": "0001", "proposer": "optuna",
                                                            "status": ExperimentStatus.DISCARD}))
    transcript = Transcript(tmp_path / "proposal.jsonl")
    proposal = proposer.propose(context, transcript)
    reminders = [e["content"] for e in transcript.events() if e["type"] == "tool_result" and e["is_error"]]
    assert len(reminders) == 1 and "the lesson of experiment 0001 is due" in reminders[0]
    assert proposal.lesson_for == "0001" and proposal.lesson == "(not given)"


def test_the_first_blocks_are_cached_for_an_hour_above_the_models_minimum(workspace, server, tmp_path):
    """System prompt and train.py each behind a 1-hour breakpoint, the newest message a 5-minute one; on
    Opus 4.6 (4096-token minimum) the system prompt alone is too short to be marked. A second proposal
    (another conversation) reads both 1-hour stretches from the cache."""
    server.script(tool_call("submit_experiment", CHANGE), tool_call("submit_experiment", CHANGE))
    factory = conversation_factory("anthropic:claude-opus-4-6")
    for _ in range(2):
        proposal, seen = propose(workspace, LLMProposer(factory, workspace.dir, PriceTable(), retry_base_s=0.01),
                                 tmp_path)
        assert not isinstance(proposal, Exception), proposal
    first, second = server.requests[0].body, server.requests[1].body
    assert "cache_control" not in first["system"][0]
    blocks = first["messages"][0]["content"]
    assert blocks[0]["text"].startswith("train.py at the best commit")
    assert blocks[0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert blocks[1]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
    params = [e["params"] for e in seen if e["type"] == "assistant"][0]
    assert any(p.startswith("system: not placed") and "4096" in p for p in params["cache_breakpoints"])
    usage = server.requests[1].usage
    assert usage["cache_read_input_tokens"] > 4096 and usage["cache_creation"]["ephemeral_1h_input_tokens"] == 0
    assert second["messages"][0]["content"][0]["text"] == blocks[0]["text"]


def test_a_refused_effort_or_configuration_ends_run_in_seconds_before_anything_trains(workspace, server):
    command = [sys.executable, "-m", "agent.cli", "run", "--tag", "llm", "--proposer", "llm", "--max-experiments",
               "3", "--workspaces", str(workspace.dir.parent)]
    logs = sorted((workspace.dir / "logs").glob("*"))
    static = subprocess.run(command + ["--model", "anthropic:claude-opus-4-6", "--effort", "xhigh"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert static.returncode == 2 and "--effort xhigh is refused by claude-opus-4-6: it takes low, medium, high, " \
                                       "max" in static.stdout.replace("\n", " ")
    assert server.requests == []
    server.script(error(400, body={"type": "error", "error": {
        "type": "invalid_request_error", "message": "thinking.type.adaptive is not supported for this model"}}))
    refused = subprocess.run(command + ["--model", "anthropic:claude-opus-5-5"], capture_output=True, text=True,
                             cwd=ROOT, timeout=60)
    shown = refused.stdout.replace("\n", " ")
    assert refused.returncode == 2 and "refused the night's configuration" in shown and "Fix:" in shown
    assert len(server.requests) == 1 and sorted((workspace.dir / "logs").glob("*")) == logs  # nothing trained


CURRENT_MODELS = [f"{row.provider}:{row.name}" for row in TABLE if not row.retired]


@pytest.mark.parametrize("model", CURRENT_MODELS)
def test_every_current_model_of_the_table_proposes_reasons_and_hits_the_cache(workspace, server, tmp_path, model):
    """Each row as the service takes it: nothing refused (thinking, effort, output limit, caching), the reasoning
    in the transcript, the second request reading the first one's prefix from the cache, the spend priced."""
    info = parse_model(model)[1]
    server.script(tool_call("read_file", {"path": "train.py"}, thinking="The schedule first."),
                  tool_call("submit_experiment", CHANGE))
    proposer = LLMProposer(conversation_factory(model, cache_key="llm"), workspace.dir, PriceTable(),
                           retry_base_s=0.01, outage_window_s=10)
    proposal, seen = propose(workspace, proposer, tmp_path)
    assert not isinstance(proposal, Exception), proposal
    assert server.refusals == [] and server.pending == 0
    thoughts = [e["text"] for e in seen if e["type"] == "thinking"]
    assert thoughts == (["The schedule first."] if info.thinking != "none" or info.reasoning else [])
    second = server.requests[1].usage
    read = (second["cache_read_input_tokens"] if info.provider == "anthropic"
            else second["input_tokens_details"]["cached_tokens"])
    assert read > 4096, second  # at least system prompt and train.py, whatever the model's minimum
    assert proposal.usage.cost_usd > 0


def test_a_stream_that_ends_inside_a_tool_call_is_retried_never_taken_whole(workspace, server, tmp_path):
    """A body that stops after part of a submission (no message_delta, no message_stop) is incomplete, not a
    shorter submission: the call is retried and the whole one is taken."""
    two_edits = reasoned({"description": "two changes", "edits": [
        {"old_string": "FINAL_LR_FRAC = 0.0", "new_string": "FINAL_LR_FRAC = 0.05"},
        {"old_string": WARMDOWN, "new_string": WARMDOWN.replace("0.5 ", "0.4 ")}]})
    server.script(stream_ended_early(tool_call("submit_experiment", two_edits)),
                  tool_call("submit_experiment", two_edits))
    proposal, seen = propose(workspace, llm_proposer(workspace, "opus"), tmp_path)
    assert not isinstance(proposal, Exception), proposal
    assert len(proposal.edits) == 2 and server.pending == 0
    retries = [e["error"] for e in seen if e["type"] == "retry"]
    assert len(retries) == 1 and "ended before the message was complete" in retries[0]


def test_the_spend_of_a_proposal_cut_by_a_night_ending_error_is_recorded(workspace, server):
    credit = {"type": "error", "error": {"type": "invalid_request_error",
                                         "message": "Your credit balance is too low to access the Anthropic API."}}
    server.script(tool_call("read_file", {"path": "train.py"}, usage=(100_000, 1_000)), error(400, body=credit))
    with pytest.raises(LoopStopped, match="no credit left"):
        loop(workspace, llm_proposer(workspace), experiments=2)
    failed = read_failures(workspace.dir)
    assert len(failed) == 1 and failed[0].usage.calls == 1
    assert run_cost(Ledger(workspace.dir)) == pytest.approx(0.5 + 0.025)  # Opus 4.5: $5 in, $25 out
