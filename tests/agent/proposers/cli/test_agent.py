"""Choosing a coding CLI with --model NAME[:MODEL], and the environment it gets: ours scrubbed of every key but
its own."""

import pytest

from agent.proposers.cli.agent import UnknownCLI, chosen_cli, scrubbed_environment


def test_model_names_the_cli_and_optionally_its_model():
    cli, model = chosen_cli("claude-code")
    assert (cli.name, cli.executable, model) == ("claude-code", "claude", None)
    assert chosen_cli("claude-code:sonnet")[1] == "sonnet"
    with pytest.raises(UnknownCLI, match="--model claude-code or --model claude-code:sonnet"):
        chosen_cli("anthropic:claude-opus-5-5")


def test_the_cli_sees_its_own_key_and_base_url_and_no_other_secret(monkeypatch, tmp_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-mine")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws")
    monkeypatch.setenv("HF_TOKEN", "hf")
    env = scrubbed_environment(chosen_cli("claude-code")[0], tmp_path, "http://127.0.0.1:9")
    assert env["ANTHROPIC_API_KEY"] == "sk-ant-mine" and env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and "PATH" in env
    assert not {"OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN"} & set(env)


def test_a_cost_cap_is_refused_where_the_cli_reports_no_cost_and_its_model_has_no_price(workspace, tmp_path,
                                                                                         monkeypatch):
    from agent.proposers.registry import ProposerRequest, ProposerUnavailable, prepare_proposer
    from agent.settings import RunSettings
    installed = tmp_path / "bin"  # the CLIs on PATH: a night without them is refused before it starts
    installed.mkdir()
    for name in ("claude", "codex"):
        (installed / name).write_text("#!/bin/sh\nexit 1\n")
        (installed / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{installed}:/usr/bin:/bin")

    def make(model, **settings):
        return prepare_proposer(ProposerRequest(RunSettings(proposer="cli", model=model, **settings), workspace.tag,
                                                lambda _: None, lambda _: None))(workspace)
    with pytest.raises(ProposerUnavailable, match="its default model is not named"):
        make("codex", max_cost_usd=5.0)
    with pytest.raises(ProposerUnavailable, match="no-such-model has no price"):
        make("codex:no-such-model", max_cost_usd=5.0)
    prices = tmp_path / "prices.json"
    prices.write_text('{"no-such-model": {"input": 1.0, "output": 2.0}}')
    priced = make("codex:no-such-model", max_cost_usd=5.0, pricing=prices)
    assert priced.cli.prices.price("no-such-model") is not None
    assert make("claude-code", max_cost_usd=5.0).cli.name == "claude-code"  # its result event states the cost
