"""What prompt caching saves: input tokens and USD per experiment over a scripted night.

Each experiment is one proposal, as the LLM proposer makes it, against the loopback LLM server
(which bills cache reads and writes the way the services do, each model's minimum cacheable length
and the entries' lifetimes included; tokens estimated as JSON length / 4): the model reads train.py,
lists the experiments, looks at two diffs and the track, and submits; the history it is shown grows by
one row per experiment (the synthetic night of benchmarks/state_message.py), and each keep changes
train.py. Between two proposals the
server's cache clock moves on by --run-seconds, the training run nobody waits for here: 5-minute
entries are gone by the next proposal, 1-hour ones are not. Printed per model and caching mode: input
tokens per experiment (fresh, cache writes, cache reads), the input bill and the whole bill (200
output tokens per call) per experiment at list prices, and a night of 100 experiments.

    .venv/bin/python benchmarks/llm_caching.py [--experiments 20] [--run-seconds 330]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("AUTORESEARCH_TRACK", "test")

WARMDOWN = "WARMDOWN_RATIO = 0.5       # linear decay over the last half"
CALLS = 6  # read train.py, list the experiments, two diffs, read track.json, submit
MODELS = ["anthropic:claude-opus-5-5", "anthropic:claude-sonnet-5-5", "anthropic:claude-haiku-5-5",
          "openai:gpt-6.2-sol", "openai:gpt-5.6"]
# OpenAI caches automatically whatever the request says: only the configuration the loop sends is measured.
MODES = [(model, caching) for model in MODELS for caching in (False, True) if caching or model.startswith("anthropic")]


def night(model: str, caching: bool, experiments: int, run_seconds: float) -> list:
    """Usage of each experiment's proposal (agent.llm.types.Usage)."""
    from agent.llm.pricing import PriceTable
    from agent.llm.select import conversation_factory
    from agent.proposers.base import ProposalContext
    from agent.proposers.llm import LLMProposer
    from agent.recording.transcript import Transcript
    from benchmarks.state_message import synthetic_night
    from tests.helpers.llm_server import LLMServer, tool_call
    from tests.helpers.submissions import reasoned
    from trainer.tracks.spec import TrackConstants, TrackSpec

    directory = Path(tempfile.mkdtemp(prefix="caching-bench-"))
    shutil.copy(REPO / "trainer" / "prepare.py", directory / "prepare.py")
    train = (REPO / "trainer" / "train.py").read_text()
    program = (REPO / "prompts" / "program.md").read_text()
    change = reasoned({"description": "WARMDOWN_RATIO 0.5 -> 0.4",
                       "edits": [{"old_string": WARMDOWN, "new_string": WARMDOWN.replace("0.5 ", "0.4 ")}]})
    usages, clock = [], [0.0]
    with LLMServer() as server:
        server.cache.clock = lambda: clock[0]
        os.environ.update(ANTHROPIC_API_KEY="bench", ANTHROPIC_BASE_URL=server.anthropic_base_url(),
                          OPENAI_API_KEY="bench", OPENAI_BASE_URL=server.openai_base_url())
        proposer = LLMProposer(conversation_factory(model, caching=caching, cache_key="nightly"), directory,
                               PriceTable(), retry_base_s=0.01, outage_window_s=10)
        night_records = synthetic_night(experiments)
        for number in range(1, experiments + 1):
            history = night_records[:number]
            best = [r for r in history if r.status.value == "keep"][-1]
            server.script(tool_call("read_file", {"path": "train.py"}, thinking="Where is the schedule?"),
                          tool_call("list_experiments", {}, thinking="What was tried?"),
                          tool_call("show_diff", {"experiment_id": history[-1].id}, thinking="The last one."),
                          tool_call("show_diff", {"experiment_id": history[0].id}, thinking="And the first."),
                          tool_call("read_file", {"path": "track.json"}, thinking="The budget?"),
                          tool_call("submit_experiment", change, thinking="A shorter warm-down."))
            track = TrackSpec.model_construct(track="gpu", fingerprint=None,
                                              constants=TrackConstants.model_construct(time_budget=300))
            context = ProposalContext(track=track, program_name="program",
                                      program_text=program, train_source=train, best=best, history=history,
                                      experiment_id=f"{number:04d}")
            proposal = proposer.propose(context, Transcript(directory / f"{number:04d}.jsonl"))
            usages.append(proposal.usage)
            if night_records[number].status.value == "keep":  # the next proposals see the new best's train.py
                train += f"# kept in experiment {number}\n"
            clock[0] += run_seconds
    shutil.rmtree(directory, ignore_errors=True)
    return usages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=20)
    parser.add_argument("--run-seconds", type=float, default=330.0, help="time between two proposals")
    parser.add_argument("--smoke", action="store_true", help="2 experiments, one model of each service (the suite's)")
    args = parser.parse_args()
    modes = [MODES[1], MODES[-1]] if args.smoke else MODES
    experiments = 2 if args.smoke else args.experiments
    from rich.console import Console
    from rich.table import Table

    from agent.llm.pricing import PriceTable
    from agent.llm.types import Usage

    table = Table("model", "caching", "input tok/exp", "fresh", "cache write", "cache read", "input $/exp",
                  "total $/exp", "100 experiments", "input cost vs uncached",
                  title=f"{experiments} experiments, {CALLS} calls each, {args.run_seconds:.0f} s apart")
    for model, caching in modes:
        usages = night(model, caching, experiments, args.run_seconds)
        n = len(usages)
        total = Usage.total(*usages)
        price = PriceTable().price(model.split(":", 1)[1])
        # Each call was priced on its own (no call here reaches a long-context tier); the input's share is the
        # rest of the bill once the output is taken off.
        input_usd = (total.cost_usd - total.output_tokens * price.output / 1e6) / n
        uncached = total.input_tokens * price.input / 1e6 / n
        fresh = total.input_tokens - total.cache_read_tokens - total.cache_write_tokens
        table.add_row(model.split(":", 1)[1], ("on" if caching else "off") if model.startswith("anthropic")
                      else "automatic + breakpoint", f"{total.input_tokens / n:,.0f}", f"{fresh / n:,.0f}",
                      f"{total.cache_write_tokens / n:,.0f}", f"{total.cache_read_tokens / n:,.0f}",
                      f"${input_usd:.4f}", f"${total.cost_usd / n:.4f}", f"${100 * total.cost_usd / n:.2f}",
                      f"{uncached / input_usd:.1f}x cheaper" if caching or model.startswith("openai") else "1.0x")
    Console(width=170).print(table)


if __name__ == "__main__":
    main()
