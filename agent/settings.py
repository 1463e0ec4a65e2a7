"""The options of the research loop and of `autoresearch run`, as one settings object each.

RunSettings is LoopSettings plus how to propose and where to train; `autoresearch run` offers
every field as an option (--field-name, or the field's alias; its description is the help), so
an option is added by adding a field. Fields marked internal() are settings of the loop that
the command line does not offer.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


def internal(default):
    return Field(default, json_schema_extra={"cli": False})


class OnPlateau(str, Enum):
    SWITCH = "switch"      # to the next program of --programs
    STOP = "stop"          # start no more experiments
    CONTINUE = "continue"  # only say so


class LoopSettings(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    max_experiments: int | None = Field(None, description="Experiments to run now (the baseline counts).")
    max_hours: float | None = Field(None, description="Start no experiment after this many hours.")
    min_delta: float = Field(0.0, description="A keep must also gain more than this.")
    grace_seconds: float = Field(120.0, description="Hard timeout = 2 x budget + this (2 x 10 x budget + this where "
                                                    "the budget is steps or FLOPs).")
    timeout_seconds: float | None = internal(None)  # overrides the hard timeout
    max_fix_attempts: int = internal(2)             # fixes a proposer may submit for a fixable crash
    max_cost_usd: float | None = Field(None, description="Stop once the spend of the tag reaches this: its LLM "
                                                         "spend, plus its runs' GPU time at --gpu-usd-per-hour "
                                                         "when that is given.")
    gpu_usd_per_hour: float | None = Field(None, gt=0, description="What a GPU-hour costs, in USD: the report's gain "
                                                                   "per dollar and --max-cost-usd then count the "
                                                                   "runs' GPU time (one GPU per run) besides the "
                                                                   "LLM spend.")
    outage_poll_seconds: float = internal(60.0)     # while the LLM provider is down, try again this often
    overlap: bool = Field(True, description="Propose the next experiment while the current one trains.")
    proposers: int | None = Field(None, ge=1, description="Proposals (LLM conversations) made at once (default: "
                                  "as many as keep the training slots fed at the measured proposal and run times)")
    parallel: int | None = Field(None, ge=1, description="Experiments in flight at once (default: the runner's "
                                                         "slots, one per GPU for the local runner).")
    seed: int = Field(42, description="The baseline's seed; each later run gets one not used before.")
    noise_seeds: int = Field(2, description="Re-runs of the best that measure sigma of val_bpb (0: no noise floor, "
                                            "plain comparison).")
    noise_every_keeps: int = Field(5, alias="noise_every",
                                   description="Measure the noise floor again after this many keeps.")
    keep_sigmas: float = Field(2.0, description="Keep when the gain exceeds this many sigma; smaller gains are "
                                                "re-run and judged on the mean.")
    plateau: int | None = Field(None, ge=0, description="A plateau is this many experiments in a row without a "
                                "keep (default: 25 on the gpu tracks, 15 on cpu, none on the test tracks; 0: none).")
    on_plateau: OnPlateau | None = Field(None, description="What a plateau does: switch to the next of --programs, "
                                         "stop, or continue (only say so). Default: switch with --programs, else stop.")
    programs: str | None = Field(None, description="Research programs to rotate through at plateaus, comma-separated "
                                 "(a.md,b.md): the tag follows the first (or the one of them it follows now).")
    control_every: int = Field(8, ge=0, description="Re-run the best with a fresh seed after this many experiments "
                               "without a keep, and once on each new best, pooling the run into its mean so that "
                               "decisions follow the machine's conditions (0: never; none without a noise floor).")


class RunSettings(LoopSettings):
    tag: str = Field("demo", description="Run tag: the workspace is workspace/<tag>, branch autoresearch/<tag>.")
    track: str = Field("cpu", description="Track for a new tag (an existing tag keeps its own).")
    profile: str | None = Field(None, description="Hardware profile for a new tag (default: this machine's; "
                                                   "`autoresearch doctor` lists them).")
    proposer: str = Field("optuna", description="A proposer of agent/proposers/registry.py (the help lists them).")
    model: str | None = Field(None, description="PROVIDER:MODEL for llm/hybrid: anthropic:..., openai:..., "
                                                "openai-compatible:NAME; for cli: claude-code[:MODEL].")
    base_url: str | None = Field(None, description="Server URL (openai-compatible, or a proxy).")
    program: Path | None = Field(None, description="The research program (default: the tag's).")
    max_tool_calls: int = Field(20, description="Tool calls an LLM may make per proposal.")
    cli_timeout_minutes: float = Field(30.0, gt=0, description="--proposer cli: minutes the coding CLI may take for "
                                                               "one proposal; then it is killed.")
    thinking_budget: int = Field(4000, description="Thinking tokens for Anthropic models that only take a budget "
                                                   "(Opus 4.5, Haiku 4.5).")
    effort: str | None = Field(None, description="Reasoning effort: none, minimal, low, medium, high, xhigh or max, "
                                                 "as the model takes them (checked at start against the model "
                                                 "table). Default: the model's own; medium for GPT-5.1 to 5.5, "
                                                 "which would not reason otherwise.")
    pricing: Path | None = Field(None, description='JSON prices, USD per million tokens, e.g. {"my-model": '
                                                   '{"input": 3, "output": 15, "cache_read": 0.3}}; extends and '
                                                   'overrides the model table.')
    hybrid_share: float = Field(0.3, description="Share of hybrid experiments proposed by Optuna.")
    algorithmic_share: float = Field(0.5, ge=0.0, le=1.0,
                                     description="llm and hybrid: when fewer of the LLM's last 10 experiments than "
                                                 "this share changed the code, its next conversation is asked for "
                                                 "a code change (Optuna ignores it).")
    outage_minutes: float = Field(30.0, description="Retry a silent LLM provider this long, then pause.")
    runner: str = Field("local", description="A runner of agent/running/registry.py (the help lists them).")
    spool: Path | None = Field(None, description="The spool directory shared with trainer workers.")
    mlflow: str | None = Field(None, description="MLflow tracking URI to mirror every experiment to (default: "
                                                 "$MLFLOW_TRACKING_URI if set).")
    notify: list[str] = Field([], description="A webhook to tell of keeps, crash streaks, plateaus, the loop "
                              "stopping and the night's end (repeatable): Slack, Discord and ntfy URLs get their "
                              "own body, others a JSON one; prefix slack+, discord+, ntfy+ or json+ to choose. "
                              "Never stored: give it again when resuming.")
    workspaces: Path | None = Field(None, description="Where workspaces live (default $AUTORESEARCH_WORKSPACES or "
                                                      "./workspace).")
    cache: Path | None = Field(None, description="Cache directory (default $AUTORESEARCH_CACHE or "
                                                 "~/.cache/autoresearch).")
