"""The options of the research loop and of `autoresearch run`, as one settings object each.

RunSettings is LoopSettings plus how to propose and where to train; `autoresearch run` offers
every field as an option (--field-name, or the field's alias; its description is the help, its
panel() groups it), so an option is added by adding a field. Fields marked internal() are
settings of the loop that the command line does not offer. Every bound is the field's own, so a
bad value is refused before anything is created.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

ESSENTIALS, DECIDING, LLM, COST, WHERE, WATCHING = ("The night", "Deciding past the noise", "The researcher",
                                                     "Cost", "Where it trains and keeps its files", "Watching")
CODING_CLI_NAMES = ("claude-code", "codex")  # --model names that mean the cli proposer (agent/proposers/cli/agent)


def internal(default, **bounds):
    return Field(default, json_schema_extra={"cli": False}, **bounds)


def option(default, panel: str, description: str, **bounds):
    return Field(default, description=description, json_schema_extra={"panel": panel}, **bounds)


class OnPlateau(str, Enum):
    SWITCH = "switch"      # to the next program of the rotation (--program given more than once)
    STOP = "stop"          # start no more experiments
    CONTINUE = "continue"  # only say so


class LoopSettings(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    max_experiments: int | None = option(None, ESSENTIALS, "Experiments to run now (the baseline counts; 0: only "
                                                           "settle what a stopped night left in flight).", ge=0)
    max_hours: float | None = option(None, ESSENTIALS, "Start no experiment after this many hours.", gt=0)
    parallel: int | None = option(None, ESSENTIALS, "Experiments in flight at once (default: the runner's slots, "
                                                    "one per GPU here).", ge=1)
    seed: int = option(42, DECIDING, "The baseline's seed; each later run gets one not used before.", ge=0)
    noise_seeds: int = option(2, DECIDING, "Re-runs of the best that measure sigma of val_bpb (0: no noise floor, "
                                           "plain comparison).", ge=0, le=20)
    keep_sigmas: float = option(2.0, DECIDING, "Keep when the gain exceeds this many sigma; smaller gains are "
                                               "re-run and judged on the mean.", ge=0, le=10)
    min_delta: float = option(0.0, DECIDING, "A keep must also gain more than this (val_bpb).", ge=0)
    control_every: int = option(8, DECIDING, "Re-run the best with a fresh seed after this many experiments "
                                             "without a keep, and once on each new best (0: never).", ge=0)
    plateau: int | None = option(None, DECIDING, "A plateau is this many experiments in a row without a keep "
                                                 "(default: 25 on the gpu tracks, 15 on cpu, none on the test "
                                                 "tracks; 0: none).", ge=0)
    on_plateau: OnPlateau | None = option(None, DECIDING, "What a plateau does: switch to the next --program, "
                                                          "stop, or continue (only say so). Default: switch when "
                                                          "--program is given more than once, else stop.")
    proposers: int | None = option(None, LLM, "Proposals (LLM conversations) made at once (default: as many as "
                                              "keep the training slots fed).", ge=1, le=64)
    max_cost_usd: float | None = option(None, COST, "Stop once the tag's spend reaches this: its LLM spend, plus "
                                                     "its runs' GPU time at --gpu-usd-per-hour when given.", gt=0)
    gpu_usd_per_hour: float | None = option(None, COST, "What a GPU-hour costs, in USD: the report's gain per "
                                                        "dollar and --max-cost-usd then count GPU time.", gt=0)
    programs: list[Path] = internal([])             # the rotation: --program given more than once
    grace_seconds: float = internal(120.0, ge=0)    # hard timeout = 2 x budget + this (2 x 10 x budget on steps/FLOPs)
    timeout_seconds: float | None = internal(None)  # overrides the hard timeout
    max_fix_attempts: int = internal(2, ge=0)       # fixes a proposer may submit for a fixable crash
    outage_poll_seconds: float = internal(60.0, gt=0)  # while the LLM provider is down, try again this often
    overlap: bool = internal(True)                  # propose the next experiment while the current one trains
    noise_every_keeps: int = internal(5, ge=1)      # measure the noise floor again after this many keeps
    counted_seeds: bool = internal(False)           # seeds count up from --seed (tests): a run can predict them


class RunSettings(LoopSettings):
    tag: str = option("demo", ESSENTIALS, "Run tag: the workspace is workspace/<tag>, branch autoresearch/<tag>.")
    track: str | None = option(None, ESSENTIALS, "Track for a new tag (default: gpu on a machine with a CUDA GPU, "
                                                 "else cpu; an existing tag keeps its own).")
    model: str | None = option(None, ESSENTIALS, "PROVIDER:MODEL (anthropic:..., openai:..., openai-compatible:NAME) "
                                                 "for the LLM researcher, or claude-code[:MODEL] / codex[:MODEL] for "
                                                 "your own coding CLI. Without it the offline Optuna proposer runs.")
    proposer: str | None = option(None, LLM, "Default: llm with an LLM --model, cli with claude-code or codex, "
                                             "optuna without --model.")
    program: list[Path] = option([], ESSENTIALS, "The research program (default: the tag's). Give it more than "
                                                 "once to rotate through them at plateaus.")
    effort: str | None = option(None, LLM, "Reasoning effort (none, minimal, low, medium, high, xhigh, max) as the "
                                           "model takes it; default: the model's own.")
    base_url: str | None = option(None, LLM, "Server URL (openai-compatible, or a proxy).")
    pricing: Path | None = option(None, COST, 'JSON prices, USD per million tokens, e.g. {"my-model": {"input": 3, '
                                              '"output": 15, "cache_read": 0.3}}; extends the model table.')
    hybrid_share: float = option(0.3, LLM, "--proposer hybrid: the share of experiments Optuna proposes.",
                                 ge=0, le=1)
    cli_timeout_minutes: float = option(30.0, LLM, "--proposer cli: minutes the coding CLI may take for one "
                                                   "proposal; then it is killed.", gt=0)
    profile: str | None = option(None, WHERE, "Hardware profile for a new tag (default: this machine's; "
                                              "`autoresearch doctor` lists them).")
    spool: Path | None = option(None, WHERE, "Train on the trainer workers sharing this spool directory.")
    ray_address: str | None = option(None, WHERE, "Train on the Ray cluster at HOST:PORT.")
    workspaces: Path | None = option(None, WHERE, "Where workspaces live (default $AUTORESEARCH_WORKSPACES, else "
                                                  "workspace/ in this checkout).")
    cache: Path | None = option(None, WHERE, "Cache directory (default $AUTORESEARCH_CACHE or "
                                             "~/.cache/autoresearch).")
    mlflow: str | None = option(None, WATCHING, "MLflow tracking URI to mirror every experiment to (default: "
                                                "$MLFLOW_TRACKING_URI if set).")
    notify: list[str] = option([], WATCHING, "A webhook told of keeps, crash streaks, plateaus, the loop stopping "
                                             "and the night's end (repeatable): Slack, Discord and ntfy URLs get "
                                             "their own body, others JSON; prefix slack+, discord+, ntfy+ or json+ "
                                             "to choose. Never stored.")
    max_tool_calls: int = internal(20, ge=1)        # tool calls an LLM may make per proposal
    thinking_budget: int = internal(4000, ge=1024)  # for Anthropic models that take only a budget (Opus/Haiku 4.5)
    algorithmic_share: float = internal(0.5, ge=0, le=1)  # ask for a code change below this share of the last 10
    outage_minutes: float = internal(30.0, gt=0)    # retry a silent LLM provider this long, then pause

    @model_validator(mode="after")
    def _implied(self) -> RunSettings:
        """The proposer --model implies, the rotation --program implies; a pair that contradicts itself refused."""
        implied = "optuna" if self.model is None else (
            "cli" if self.model.partition(":")[0] in CODING_CLI_NAMES else "llm")
        if self.proposer is None:
            self.proposer = implied
        elif self.proposer == "optuna" and self.model is not None:
            raise ValueError(f"--proposer optuna takes no --model (it proposes offline): leave out --proposer to "
                             f"use {self.model} ({implied}), or leave out --model")
        if self.spool is not None and self.ray_address is not None:
            raise ValueError("give --spool DIR or --ray-address HOST:PORT, not both: each names where runs train")
        if len(self.program) > 1 and not self.programs:
            self.programs = list(self.program)
        return self
