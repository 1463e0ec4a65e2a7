"""Hybrid through the real loop, a scripted LLM and a synthetic runner: Optuna sets values, the LLM changes code
(a lone value of its is refused back, as is a change already tried on the same best), every experiment carries
its novelty label into the ledger, `status` and the report, and --algorithmic-share asks for code when the
LLM's recent experiments were values."""

import io
import json

import pytest
from rich.console import Console

from agent.llm.pricing import PriceTable
from agent.llm.select import conversation_factory
from agent.loop import LoopSettings, run_loop
from agent.proposers.hybrid import HybridProposer
from agent.proposers.llm import LLMProposer
from agent.proposers.optuna_search import OptunaProposer, study_name
from agent.proposers.state.message import CODE_CHANGE_ASKED
from agent.recording.ledger import Ledger
from agent.report.build import write_report
from agent.report.status_view import status_view
from tests.helpers.llm_responders import first_user_text
from tests.helpers.llm_server import LLMServer, tool_call
from tests.helpers.submissions import reasoned

WARMDOWN = "WARMDOWN_RATIO = 0.5       # linear decay over the last half"
NORM = "    return F.rms_norm(x, (x.size(-1),))"
SCHEDULE = "    remaining = (1 - progress) / WARMDOWN_RATIO"
BLEND = "    return remaining + (1 - remaining) * FINAL_LR_FRAC"
EPS = "    return F.rms_norm(x, (x.size(-1),), eps=1e-6)"
CLAMPED = "    remaining = max(0.0, (1 - progress) / WARMDOWN_RATIO)"


def submit(description: str, old: str, new: str):
    return tool_call("submit_experiment", reasoned({"description": description,
                                                   "edits": [{"old_string": old, "new_string": new}]}))


@pytest.fixture
def llm_server(monkeypatch):
    with LLMServer() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url())
        yield server


def llm(workspace, **options) -> LLMProposer:
    return LLMProposer(conversation_factory("anthropic:claude-opus-5-5"), workspace.dir, PriceTable(),
                       retry_base_s=0.01, outage_window_s=10.0, **options)


def runner():
    from tests.helpers.synthetic_runner import SyntheticRunner
    return SyntheticRunner({EPS: 0.01}, noise=0.0)  # only the LLM's first code change helps


def tool_results(workspace, experiment_id):
    path = workspace.dir / "transcripts" / f"{experiment_id}.jsonl"
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["type"] == "tool_result"]


def first_messages(server) -> list[str]:
    """The first user message of every conversation, in order."""
    return [first_user_text(r.body) for r in server.requests if r.api == "anthropic" and len(r.body["messages"]) == 1]


def test_optuna_sets_values_and_the_llm_changes_code(workspace, llm_server):
    llm_server.script(
        submit("WARMDOWN_RATIO 0.5 -> 0.3", WARMDOWN, WARMDOWN.replace("0.5 ", "0.3 ")),  # refused: a lone value
        submit("rms_norm with eps 1e-6", NORM, EPS),                                         # 0002, kept
        submit("clamp the warm-down", SCHEDULE, CLAMPED),                                    # 0004
        submit("clamp the warm-down again", SCHEDULE, CLAMPED.replace("0.0, ", "0.0,   ")),  # refused: 0004's
        submit("cap the schedule at 1", BLEND, BLEND.replace("return ", "return min(1.0, ") + ")"))  # 0006
    hybrid = HybridProposer(llm(workspace), OptunaProposer(workspace.dir / "optuna.journal", seed=5), 0.5)
    run_loop(workspace, hybrid, runner(), LoopSettings(max_experiments=7, noise_seeds=0, overlap=False),
             say=lambda _: None)
    assert llm_server.pending == 0
    records = Ledger(workspace.dir).records
    baseline, experiments = records[0], records[1:]
    assert [r.proposer for r in experiments] == ["optuna", "llm"] * 3
    assert baseline.novelty is None
    assert [r.novelty for r in experiments] == ["hyperparameter", "algorithmic"] * 3
    assert [r.status.value for r in experiments] == ["discard", "keep", "discard", "discard", "discard", "discard"]
    for r in experiments[::2]:  # Optuna's: one value of the block each
        changed = [line for line in r.diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
        assert len(changed) == 1 and changed[0][1:].startswith(r.proposal["parameter"] + " = ")
    # Optuna re-tunes around the new best: its trial after the LLM's keep is in the new best's study
    assert experiments[0].proposal["study"] == study_name(baseline.commit)
    assert experiments[2].proposal["study"] == experiments[4].proposal["study"] == study_name(experiments[1].commit)

    refused = tool_results(workspace, "0002")
    assert [r["is_error"] for r in refused] == [True, False]
    assert "only sets WARMDOWN_RATIO" in refused[0]["content"] and "Optuna tunes" in refused[0]["content"]
    repeated = tool_results(workspace, "0006")
    assert [r["is_error"] for r in repeated] == [True, False]
    assert "experiment 0004 already tried this same change" in repeated[0]["content"]
    assert "min(1.0, remaining" in experiments[5].diff

    systems = {r.body["system"][0]["text"] for r in llm_server.requests if r.api == "anthropic"}
    assert systems and all("Optuna tunes the hyperparameter values" in s for s in systems)
    firsts = first_messages(llm_server)
    assert len(firsts) == 3 and "hyperparameter 1 (100%), 0 kept" in firsts[0]
    assert "hyperparameter 2 (67%), 0 kept" in firsts[1] and "algorithmic 1 (33%), 1 kept" in firsts[1]
    assert "- 0004 discard [algorithmic]" in firsts[2]
    assert all(CODE_CHANGE_ASKED not in first for first in firsts)  # every LLM experiment changed code

    for line in (workspace.dir / "experiments.jsonl").read_text().splitlines()[1:]:
        assert json.loads(line)["novelty"] in ("hyperparameter", "algorithmic")
    console = Console(file=io.StringIO(), width=250)
    console.print(status_view(workspace))
    shown = console.file.getvalue()
    assert "hyperparameter 3 (50%), 0 kept (keep rate 0%); algorithmic 3 (50%), 1 kept (keep rate 33%), mean gain " \
           "of keeps 0.010000" in shown
    assert shown.count("algorithmic") == 1 + 3 and shown.count("hyperparameter") == 1 + 3  # the line, each row
    html = write_report(workspace).read_text()
    assert ("<tr><td>algorithmic</td><td>3</td><td>50%</td><td>1</td><td>33%</td><td>0.010000</td></tr>" in html)
    assert html.count("<td>hyperparameter</td>") == 1 + 3 and html.count("<td>algorithmic</td>") == 1 + 3


@pytest.mark.parametrize("share, asked", [(0.5, True), (0.0, False)])
def test_the_llm_is_asked_for_code_when_its_recent_changes_were_values(workspace, llm_server, share, asked):
    llm_server.script(submit("WARMDOWN_RATIO 0.5 -> 0.3", WARMDOWN, WARMDOWN.replace("0.5 ", "0.3 ")),
                      submit("FINAL_LR_FRAC 0.0 -> 0.1", "FINAL_LR_FRAC = 0.0", "FINAL_LR_FRAC = 0.1"))
    run_loop(workspace, llm(workspace, algorithmic_share=share), runner(),
             LoopSettings(max_experiments=3, noise_seeds=0, overlap=False), say=lambda _: None)
    assert [r.novelty for r in Ledger(workspace.dir).records[1:]] == ["hyperparameter", "hyperparameter"]
    first, second = first_messages(llm_server)
    assert CODE_CHANGE_ASKED not in first  # no experiment of the LLM yet
    assert (CODE_CHANGE_ASKED in second) is asked
    if asked:
        assert "only 0% of your last experiments changed the code (the run asks for at least 50%)" in second
