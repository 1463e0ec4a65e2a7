"""One experiment on the test track against the real service named by AUTORESEARCH_LIVE_MODEL
(PROVIDER:MODEL), with the key from the SDK's environment variable. Run it with `make live-check
MODEL=anthropic:claude-opus-5-5`; without a model or a key it is skipped, saying why. It costs a few
cents and needs the internet, so plain `pytest` and CI never run it."""

import json
import os
import shutil
from pathlib import Path

import pytest

from agent.llm.pricing import PriceTable
from agent.llm.select import KEY_VARIABLES, conversation_factory
from agent.loop import LoopSettings, run_loop
from agent.proposers.llm import LLMProposer
from agent.recording.ledger import Ledger
from agent.recording.proposal_failures import read_failures
from agent.running.runner import LocalRunner
from agent.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]
MODEL = os.environ.get("AUTORESEARCH_LIVE_MODEL", "")


def skip_reason() -> str | None:
    if not MODEL:
        return "live check: set AUTORESEARCH_LIVE_MODEL=PROVIDER:MODEL (make live-check MODEL=...) to run it"
    provider = MODEL.partition(":")[0]
    variable = KEY_VARIABLES.get(provider)
    if variable and not os.environ.get(variable) and provider != "openai-compatible":
        return f"live check of {MODEL}: no key, set {variable}"
    return None


@pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
def test_one_experiment_against_the_real_service(test_track, tmp_path):
    program = tmp_path / "program.md"
    shutil.copy(ROOT / "prompts" / "program.md", program)
    workspace = Workspace.create("live", test_track.spec, program, root=tmp_path / "workspaces")
    proposer = LLMProposer(conversation_factory(MODEL, cache_key="live-check"), workspace.dir, PriceTable(),
                           outage_window_s=120)
    run_loop(workspace, proposer, LocalRunner(), LoopSettings(max_experiments=2, noise_seeds=0, overlap=False),
             say=print)
    records = Ledger(workspace.dir).records
    assert read_failures(workspace.dir) == [], [f.reason for f in read_failures(workspace.dir)]
    assert len(records) == 2 and records[1].proposer == "llm", records[-1]
    events = [json.loads(line) for line in (workspace.dir / records[1].transcript).read_text().splitlines()]
    replies = [e for e in events if e["type"] == "assistant"]
    assert replies and all(r["request_id"] for r in replies)
    print(f"{MODEL}: {records[1].status.value} {records[1].description!r}, {records[1].llm}")
