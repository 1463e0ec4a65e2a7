"""The proposers `--proposer` chooses from, by name: a factory each, that imports its proposer's module (and
with it optuna or an LLM SDK) when called."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.running.registry import listed

if TYPE_CHECKING:
    from agent.proposers.base import Proposer
    from agent.settings import RunSettings
    from agent.workspace import Workspace


class ProposerUnavailable(Exception):
    """The proposer cannot start as asked; the message says why and what to do."""


@dataclass(frozen=True)
class ProposerRequest:
    settings: RunSettings
    tag: str
    say: Callable[[str], None]
    warn: Callable[[str], None]


Build = Callable[["Workspace"], "Proposer"]


@dataclass(frozen=True)
class ProposerChoice:
    prepare: Callable[[ProposerRequest], Build]  # every check, nothing created; raises ProposerUnavailable
    summary: str | None = None                   # said in --proposer's help after the name


def _optuna(request: ProposerRequest) -> Build:
    from agent.proposers.optuna_search import WARM_STARTS, OptunaProposer
    return lambda workspace: OptunaProposer(workspace.dir / "optuna.journal",
                                            warm_start=WARM_STARTS.get(workspace.track.track, []))


def _llm(request: ProposerRequest) -> Build:
    from agent.llm.pricing import PriceTable
    from agent.llm.select import checked_factory, model_warnings, parse_model
    from agent.llm.types import ProviderFatal
    from agent.proposers.llm import LLMProposer
    settings, model = request.settings, request.settings.model
    if model is None:
        raise ProposerUnavailable(f"--proposer {settings.proposer} needs --model PROVIDER:MODEL "
                                  "(e.g. anthropic:claude-opus-5-5)")
    try:
        for warning in model_warnings(model):
            request.warn(warning)
        prices = PriceTable(settings.pricing)
        name = parse_model(model)[1].name
        if settings.max_cost_usd is not None and prices.price(name) is None:
            raise ProposerUnavailable(
                f"--max-cost-usd cannot be enforced: {model} has no price. Give one with --pricing FILE, e.g. "
                f'{{"{name}": {{"input": 3.0, "output": 15.0, "cache_read": 0.3}}}} (USD per million tokens)')
        factory, found = checked_factory(model, settings.base_url, settings.thinking_budget, effort=settings.effort,
                                         cache_key=request.tag)
    except (ProviderFatal, OSError, ValueError) as err:
        raise ProposerUnavailable(str(err)) from err
    request.say(found)
    return lambda workspace: LLMProposer(factory, workspace.dir, prices, max_tool_calls=settings.max_tool_calls,
                                         outage_window_s=settings.outage_minutes * 60,
                                         algorithmic_share=settings.algorithmic_share)


def _cli(request: ProposerRequest) -> Build:
    from agent.proposers.cli import CLIResearcher, UnknownCLI, chosen_cli
    settings = request.settings
    try:
        cli, model = chosen_cli(settings.model)
    except UnknownCLI as err:
        raise ProposerUnavailable(str(err)) from err
    if not cli.states_cost:
        from agent.llm.pricing import PriceTable
        cli.prices = PriceTable(settings.pricing)
        if settings.max_cost_usd is not None and (model is None or cli.prices.price(model) is None):
            raise ProposerUnavailable(
                f"--max-cost-usd cannot be enforced: {cli.name} reports tokens, not cost, and "
                f"{'its default model is not named in them' if model is None else f'{model} has no price'}. "
                f"Name a priced model with --model {cli.name}:MODEL, or give its price with --pricing FILE")
    if shutil.which(cli.executable) is None:
        raise ProposerUnavailable(f"{cli.name}: `{cli.executable}` is not on PATH: install it (or put it on PATH) "
                                  "and log in, then start the night again")
    request.say(f"proposals by {cli.name} (`{cli.executable}`), model {model or 'its default'}")
    return lambda workspace: CLIResearcher(cli, model, workspace.dir, settings.base_url,
                                           settings.cli_timeout_minutes * 60, settings.algorithmic_share)


def _hybrid(request: ProposerRequest) -> Build:
    from agent.proposers.hybrid import HybridProposer
    optuna, llm = _optuna(request), _llm(request)
    return lambda workspace: HybridProposer(llm(workspace), optuna(workspace), request.settings.hybrid_share)


PROPOSERS: dict[str, ProposerChoice] = {
    "optuna": ProposerChoice(_optuna, "offline, the default without --model"),
    "llm": ProposerChoice(_llm, "implied by --model PROVIDER:MODEL"),
    "hybrid": ProposerChoice(_hybrid, "Optuna on a share"),
    "cli": ProposerChoice(_cli, "your own coding CLI, implied by --model claude-code[:MODEL] or codex[:MODEL]"),
}


def proposers_help() -> str:
    described = [name + (f" ({choice.summary})" if choice.summary else "") for name, choice in PROPOSERS.items()]
    return listed(described, ", or ") + "."


def unknown_proposer(name: str) -> str | None:
    """What to say of a --proposer that names no registered proposer; None for one that does."""
    return None if name in PROPOSERS else f"unknown proposer {name!r}: use " + listed(list(PROPOSERS), " or ")


def prepare_proposer(request: ProposerRequest) -> Build:
    """Checks that the proposer the settings name can start (model, key, effort, the service's preflight, the
    CLI on PATH) before any workspace exists; ProposerUnavailable when it cannot. Returns what builds it."""
    return PROPOSERS[request.settings.proposer].prepare(request)
