"""The Codex adapter without the CLI: --model codex[:MODEL], the CODEX_HOME and key it is given (its own home with
our provider when there is a key or a base URL, else the user's login with none of the user's config), and its
`codex exec --json` events read into the transcript and the usage."""

import json

import tomllib

from agent.llm.pricing import PriceTable
from agent.proposers.cli.agent import chosen_cli, scrubbed_environment
from agent.proposers.cli.codex import Codex
from agent.proposers.cli.outcome import CLIOutcome
from agent.recording.transcript import Transcript

# As codex exec --json 0.169.0 printed them against the loopback server (2026-12-05), trimmed.
STREAM = [
    {"type": "thread.started", "thread_id": "t-1"},
    {"type": "turn.started"},
    {"type": "error", "message": "Reconnecting... 2/5 (stream disconnected before completion)"},
    {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "Read the script first."}},
    {"type": "item.started", "item": {"id": "item_1", "type": "command_execution",
                                      "command": "/bin/bash -lc 'cat train.py'", "aggregated_output": "",
                                      "exit_code": None, "status": "in_progress"}},
    {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
                                        "command": "/bin/bash -lc 'cat train.py'", "aggregated_output": "LR = 0.1\n",
                                        "exit_code": 0, "status": "completed"}},
    {"type": "item.completed", "item": {"id": "item_2", "type": "file_change", "status": "completed",
                                        "changes": [{"path": "/s/train.py", "kind": "update"}]}},
    {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": "Proposed: LR 0.05"}},
    {"type": "turn.completed", "usage": {"input_tokens": 18669, "cached_input_tokens": 9216,
                                         "cache_write_input_tokens": 100, "output_tokens": 400,
                                         "reasoning_output_tokens": 50}},
]


def read(stream: list, path, model: str | None = None) -> tuple[list[dict], CLIOutcome]:
    codex, outcome, transcript = Codex(), CLIOutcome(), Transcript(path / "t.jsonl")
    codex.model = model
    for line in ["not json", *[json.dumps(event) for event in stream]]:
        codex.read_event(line, transcript, outcome)
    return transcript.events(), outcome


def test_model_codex_is_the_cli_default_and_codex_model_names_one():
    cli, model = chosen_cli("codex")
    assert (cli.name, cli.executable, model) == ("codex", "codex", None)
    assert chosen_cli("codex:gpt-5.5")[1] == "gpt-5.5"


def test_events_become_the_transcript_and_the_usage(tmp_path):
    seen, outcome = read(STREAM, tmp_path, model="gpt-5.5")
    assert [(e["type"], e.get("name") or e.get("text")) for e in seen] == [
        ("cli_started", None), ("cli_warning", "Reconnecting... 2/5 (stream disconnected before completion)"),
        ("thinking", "Read the script first."), ("tool_call", "shell"), ("tool_result", None),
        ("tool_call", "apply_patch"), ("tool_result", None), ("assistant", "Proposed: LR 0.05"),
        ("cli_result", "Proposed: LR 0.05")]
    assert seen[4]["content"] == "LR = 0.1\n" and seen[4]["exit_code"] == 0 and not seen[4]["is_error"]
    assert seen[5]["arguments"] == {"changes": [{"path": "/s/train.py", "kind": "update"}]}
    usage = outcome.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens,
            usage.thinking_tokens, usage.calls) == (18669, 9216, 100, 400, 50, 1)
    assert usage.cost_usd == PriceTable().cost("gpt-5.5", usage.model_copy(update={"cost_usd": 0.0})) > 0
    assert outcome.final_text == "Proposed: LR 0.05" and not outcome.failed


def test_a_failed_turn_fails_the_run_with_its_message(tmp_path):
    failed = [*STREAM[:2], {"type": "turn.failed", "error": {"message": "stream disconnected: quota exceeded"}}]
    seen, outcome = read(failed, tmp_path)
    assert outcome.failed and outcome.final_text == "stream disconnected: quota exceeded"
    assert seen[-1]["type"] == "cli_result" and seen[-1]["is_error"]
    assert Codex().failure(1, "", outcome) == "codex failed (exit code 1): stream disconnected: quota exceeded"


def test_with_a_key_codex_gets_a_home_of_its_own_with_our_provider_and_only_its_own_key(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-mine")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "user-home"))
    codex = Codex()
    env = scrubbed_environment(codex, tmp_path, "http://127.0.0.1:9/v1")
    home = tmp_path / ".codex"
    assert env["CODEX_HOME"] == str(home) and env["OPENAI_API_KEY"] == "sk-mine" and "ANTHROPIC_API_KEY" not in env
    assert env["TMPDIR"] == str(tmp_path / ".tmp")
    config = tomllib.loads((home / "config.toml").read_text())
    assert config["model_providers"][config["model_provider"]] == {
        "name": "autoresearch", "base_url": "http://127.0.0.1:9/v1", "wire_api": "responses",
        "env_key": "OPENAI_API_KEY"}
    argv = codex.command("/usr/bin/codex", tmp_path, "do it", "gpt-5.5")
    assert "--ignore-user-config" not in argv and argv[-4:] == ["-m", "gpt-5.5", "--", "do it"]
    profile = argv[argv.index("-c", argv.index('default_permissions="scratch"') + 1) + 1]
    readable = tomllib.loads(profile)["permissions"]["scratch"]["filesystem"]
    assert readable == {":minimal": "read", str(home / "tmp" / "arg0-linux"): "read", "/usr/bin": "read",
                        ":workspace_roots": {".": "write"}}


def test_without_a_key_codex_uses_the_login_in_the_user_s_home_and_none_of_its_config(monkeypatch, tmp_path):
    for name in ("OPENAI_API_KEY", "CODEX_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "user-home"))
    (tmp_path / "scratch").mkdir()
    codex = Codex()
    env = codex.environment(tmp_path / "scratch", None)
    assert env == {"CODEX_HOME": str(tmp_path / "user-home"), "TMPDIR": str(tmp_path / "scratch" / ".tmp")}
    argv = codex.command("/usr/bin/codex", tmp_path / "scratch", "do it", None)
    assert "--ignore-user-config" in argv and "--ignore-rules" in argv and "-m" not in argv
    assert f'"{tmp_path / "user-home" / "tmp" / "arg0-linux"}" = "read"' in " ".join(argv)
    assert "auth.json" not in " ".join(argv)  # the login itself stays unreadable to commands
