"""The CLI researcher with the real Codex CLI (the pinned npm package in .clis/, `make test` or
scripts/coding_clis.sh installs it) pointed at the loopback LLM server: a night through the real loop in which
`codex exec` reads train.py with its shell tool, edits it and writes proposal.json with apply_patch; its own
sandbox keeping commands, apply_patch and view_image inside the scratch directory, commands off the network and away
from the API key, with no escalation; and a refused key failing the proposal with codex's own message."""

import json
import os
import threading
from pathlib import Path

import pytest

from agent.loop import LoopSettings, run_loop
from agent.proposers.base import ProposalContext, ProposerError
from agent.proposers.cli.codex import Codex
from agent.proposers.cli.researcher import CLIResearcher
from agent.proposers.registry import ProposerRequest, prepare_proposer
from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentRecord
from agent.recording.transcript import Transcript
from agent.settings import RunSettings
from tests.helpers.cli_responders import CLAMPED, EPS, NORM, SCHEDULE, SECRET
from tests.helpers.codex_responders import (
    CODEX_BINARY,
    MODEL,
    CodexResearcher,
    add,
    offers_code_mode,
    patch,
    tool_outputs,
)
from tests.helpers.llm_server import LLMServer, error
from tests.helpers.synthetic_runner import SyntheticRunner

pytestmark = pytest.mark.skipif(not CODEX_BINARY.exists(), reason=f"Codex is not installed at {CODEX_BINARY}: run "
                                                                   "`bash scripts/coding_clis.sh`")

KEY = "sk-codex-test-key"


@pytest.fixture
def cli_env(monkeypatch, tmp_path):
    """`codex` on PATH, a home of its own, an OpenAI key for it and another provider's key it must never see."""
    monkeypatch.setenv("PATH", f"{CODEX_BINARY.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-must-not-leak")


def events(workspace, experiment_id: str) -> list[dict]:
    return Transcript(workspace.dir / "transcripts" / f"{experiment_id}.jsonl").events()


def night(workspace, server, experiments: int, model: str = f"codex:{MODEL}") -> list[ExperimentRecord]:
    settings = RunSettings(proposer="cli", model=model, base_url=server.openai_base_url())
    proposer = prepare_proposer(ProposerRequest(settings, workspace.tag, lambda _: None, lambda _: None))(workspace)
    run_loop(workspace, proposer, SyntheticRunner({EPS: 0.01}, noise=0.0),
             LoopSettings(max_experiments=experiments, noise_seeds=0, overlap=False), say=lambda _: None)
    return Ledger(workspace.dir).records


def test_a_night_with_proposer_cli_model_codex(workspace, cli_env):
    """codex's default model, which works in code mode: each tool call is made from JavaScript its `exec` runs."""
    model = CodexResearcher([("rms_norm with eps 1e-6", NORM, EPS), ("clamp the warm-down at zero", SCHEDULE, CLAMPED)])
    with LLMServer(responder=model) as server:
        records = night(workspace, server, 3, model="codex")
    experiments = records[1:]
    assert [(r.proposer, r.description) for r in experiments] == [
        ("cli", "rms_norm with eps 1e-6"), ("cli", "clamp the warm-down at zero")]
    assert experiments[0].status == "keep" and "eps=1e-6" in experiments[0].diff
    assert "max(0.0" in experiments[1].diff
    assert experiments[0].hypothesis == "rms_norm with eps 1e-6 should lower val_bpb"
    assert all(offers_code_mode(r.body) for r in server.requests)
    for record in experiments:
        seen = events(workspace, record.id)
        calls = [(e["name"], e["arguments"]) for e in seen if e["type"] == "tool_call"]
        scratch = next(e for e in seen if e["type"] == "cli_request")["scratch"]
        assert calls == [("shell", {"command": "/bin/bash -lc 'cat train.py'"}),
                         ("apply_patch", {"changes": [{"path": f"{scratch}/train.py", "kind": "update"}]}),
                         ("apply_patch", {"changes": [{"path": f"{scratch}/proposal.json", "kind": "add"}]})]
        read = next(e for e in seen if e["type"] == "tool_result")
        assert read["exit_code"] == 0 and read["content"].endswith('if __name__ == "__main__":\n    main()\n')
        assert [e["text"] for e in seen if e["type"] == "thinking"][:1] == ["I will do step 1 now."]
        assert [e for e in seen if e["type"] == "cli_warning"] == [], "codex ignored a setting or retried"
        request = next(e for e in seen if e["type"] == "cli_request")
        assert request["argv"][1:3] == ["exec", "--json"] and "-m" not in request["argv"]
        assert 'default_permissions="scratch"' in request["argv"] and "ANTHROPIC_API_KEY" not in request["environment"]
        assert not os.path.exists(request["scratch"]), "the scratch directory is removed afterwards"
    assert {(r.api, r.path) for r in server.requests} == {("responses", "/v1/responses")}
    assert all(r.status == 200 and r.headers["authorization"] == f"Bearer {KEY}" for r in server.requests)
    for field, sent in (("output_tokens", lambda u: u["output_tokens"]), ("input_tokens", lambda u: u["input_tokens"]),
                        ("cache_read_tokens", lambda u: u["input_tokens_details"]["cached_tokens"])):
        assert sum(getattr(r.llm, field) for r in experiments) == sum(sent(r.usage) for r in server.requests), field
    assert "sk-ant-must-not-leak" not in json.dumps([(r.headers, r.body) for r in server.requests])


def test_commands_outside_the_scratch_directory_the_network_and_the_key_are_refused_by_codex(
        workspace, cli_env, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\n")
    outside = tmp_path / "planted.txt"
    ledger = workspace.dir / "experiments.jsonl"
    with LLMServer() as server:
        fetch = f"python3 -c \"import urllib.request; urllib.request.urlopen('{server.url}/stolen')\""
        model = CodexResearcher([("rms_norm with eps 1e-6", NORM, EPS)], before=[
            ("exec_command", {"cmd": f"cat {secret}"}), ("exec_command", {"cmd": f"head -c 300 {ledger}"}),
            ("exec_command", {"cmd": fetch}), ("exec_command", {"cmd": "env"}),
            ("apply_patch", patch(add(str(outside), "planted"))), ("view_image", {"path": str(secret)}),
            ("exec_command", {"cmd": f"cat {secret}", "sandbox_permissions": "require_escalated",
                              "justification": "I need it"})])
        server.responder = model
        records = night(workspace, server, 2)
    assert records[-1].description == "rms_norm with eps 1e-6"
    assert records[-1].llm.cost_usd > 0, f"{MODEL} is priced"
    last = max(server.requests, key=lambda r: len(tool_outputs(r.body)))
    outputs = [o["output"] for o in tool_outputs(last.body)[:7]]
    read_secret, read_ledger, network, environment, planted, viewed, escalated = outputs
    assert "Process exited with code 1" in read_secret and f"{secret}: No such file or directory" in read_secret
    assert f"cannot open '{ledger}' for reading: No such file or directory" in read_ledger
    assert "URLError: <urlopen error [Errno 1] Operation not permitted>" in network  # no socket at all
    assert "HOME=" in environment and KEY not in environment and "OPENAI_API_KEY" not in environment
    assert planted == "patch rejected: writing outside of the project; rejected by user approval settings"
    assert not outside.exists()
    assert viewed == f"unable to locate image at `{secret}`: No such file or directory (os error 2)"
    assert escalated == ("approval policy is Never; reject command \u2014 you cannot ask for escalated permissions if "
                         "the approval policy is Never")
    assert {r.path for r in server.requests} == {"/v1/responses"}, "a command reached the server itself"
    sent = json.dumps([r.body for r in server.requests])
    assert SECRET not in sent and ledger.read_text()[:200] not in sent


def test_a_refused_key_fails_the_proposal_with_codex_s_own_message(workspace, cli_env):
    with LLMServer(responder=lambda api, body: error(401)) as server:
        researcher = CLIResearcher(Codex(), None, workspace.dir, base_url=server.openai_base_url(), timeout_s=60)
        with pytest.raises(ProposerError) as failed:
            researcher.propose(context_of(workspace), Transcript(workspace.dir / "t.jsonl"))
    said = str(failed.value)
    assert said.startswith("codex failed (exit code 1): unexpected status 401 Unauthorized: Invalid API key"), said
    assert said.endswith(". Log in once with `codex login`, or set OPENAI_API_KEY (or CODEX_API_KEY) in the "
                         "environment the service runs in.")
    assert server.requests and all(r.status == 401 for r in server.requests)


def running_commands_with(marker: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            said = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in said:
            found.append(said)
    return found


def test_links_out_of_scratch_other_processes_and_background_children_get_codex_nothing(workspace, cli_env, tmp_path):
    """A hostile session: links from scratch to files elsewhere (notes.md to a secret, which our process reads
    after codex exits), apply_patch and shell writes through links, apply_patch moving a file out or deleting one
    outside, view_image through a link, the key in another process's environment, and a child in a session of its
    own that would outlive the run; the proposal itself goes through."""
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.txt").write_text("orig\n")
    marker = "987.125"
    model = CodexResearcher([("rms_norm with eps 1e-6", NORM, EPS)], before=[
        ("exec_command", {"cmd": f"ln -s {outside} escape && ln -sf {secret} notes.md && "
                                 f"ln -s {outside}/target.txt target.txt && echo mine > mine.md && echo linked"}),
        ("apply_patch", patch(add("escape/planted.txt", "planted"))),
        ("apply_patch", patch("*** Update File: target.txt\n@@\n-orig\n+changed\n")),
        ("exec_command", {"cmd": "echo planted > escape/shell.txt; echo changed >> target.txt"}),
        ("exec_command", {"cmd": "cat /proc/[0-9]*/environ | tr '\\0' '\\n'; echo scanned"}),
        ("exec_command", {"cmd": f"setsid nohup sleep {marker} >/dev/null 2>&1 & echo started"}),
        ("apply_patch", patch(f"*** Update File: mine.md\n*** Move to: {outside}/moved.md\n@@\n-mine\n+moved\n")),
        ("apply_patch", patch(f"*** Delete File: {outside}/target.txt\n")),
        ("view_image", {"path": "notes.md"})])
    with LLMServer(responder=model) as server:
        records = night(workspace, server, 2)
    assert records[-1].description == "rms_norm with eps 1e-6" and "eps=1e-6" in records[-1].diff
    last = max(server.requests, key=lambda r: len(tool_outputs(r.body)))
    outputs = [str(o["output"]) for o in tool_outputs(last.body)[:9]]
    linked, planted, through, shell, environ, started, moved, deleted, viewed = outputs
    assert "linked" in linked and "started" in started
    assert "Failed to create parent directories" in planted and "Failed to read file to update" in through
    assert "escape/shell.txt: No such file or directory" in shell
    assert moved == "patch rejected: writing outside of the project; rejected by user approval settings"
    assert "Failed to read" in deleted and "No such file or directory" in deleted
    assert viewed.startswith("unable to locate image") and "No such file or directory" in viewed
    assert "scanned" in environ and KEY not in environ
    assert sorted(p.name for p in outside.iterdir()) == ["target.txt"]
    assert (outside / "target.txt").read_text() == "orig\n"
    assert running_commands_with(f"sleep {marker}") == [], "a child of the session outlived it"
    notes = workspace.dir / "notes.md"
    assert not notes.exists() or SECRET not in notes.read_text()
    refused = [e for e in events(workspace, records[-1].id) if e["type"] == "notes_refused"]
    assert refused and "notes.md is not a plain file" in refused[0]["reason"]
    assert SECRET not in json.dumps([r.body for r in server.requests])


def test_a_codex_killed_at_its_timeout_leaves_no_command_running(workspace, cli_env):
    """Commands left running (one in a session of its own, one still in codex's hands) when the model stops
    answering and the run is killed at its timeout."""
    detached, held = "986.125", "985.125"
    model = CodexResearcher([("rms_norm with eps 1e-6", NORM, EPS)], before=[
        ("exec_command", {"cmd": f"setsid nohup sleep {detached} >/dev/null 2>&1 & echo started"}),
        ("exec_command", {"cmd": f"sleep {held}", "yield_time_ms": 500})])
    answer, alive = threading.Event(), []

    def stalling(api, body):
        if len(tool_outputs(body)) >= 2:
            alive.extend(running_commands_with(f"sleep {detached}") + running_commands_with(f"sleep {held}"))
            answer.wait(60)  # the model stops answering
        return model(api, body)

    with LLMServer(responder=stalling) as server:
        researcher = CLIResearcher(Codex(), MODEL, workspace.dir, base_url=server.openai_base_url(), timeout_s=15)
        try:
            with pytest.raises(ProposerError, match="did not finish within 15 s; its process group was killed"):
                researcher.propose(context_of(workspace), Transcript(workspace.dir / "t.jsonl"))
            running = running_commands_with(f"sleep {detached}") + running_commands_with(f"sleep {held}")
        finally:
            answer.set()
    last = max(server.requests, key=lambda r: len(tool_outputs(r.body)))
    started, holding = [str(o["output"]) for o in tool_outputs(last.body)[:2]]
    assert "started" in started and "Process running with session ID" in holding, (started, holding)
    assert len(alive) >= 2, f"both commands run while codex waits for the model: {alive}"
    assert running == [], "a command outlived the killed codex"


def context_of(workspace) -> ProposalContext:
    source = (workspace.dir / "train.py").read_text()
    best = ExperimentRecord(id="0000", status="keep", val_bpb=2.0, commit="a" * 40, description="baseline")
    return ProposalContext(track=workspace.track, program_name="program.md", program_text="Lower val_bpb.",
                           train_source=source, best=best, history=[best], experiment_id="0001")
