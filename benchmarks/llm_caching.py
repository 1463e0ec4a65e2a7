"""What prompt caching saves: input tokens and USD per experiment over a scripted night.

Each experiment is one proposal, as the LLM proposer makes it, against the loopback LLM server
(which bills cache reads and writes the way the services do, tokens estimated as JSON length / 4):
the model reads train.py, lists the experiments, looks at two diffs and the track, and submits; the
history it is shown grows by one row per experiment. No training runs: tokens do not depend on it.
Printed per model and caching mode: input tokens per experiment (fresh, cache writes, cache reads),
the input bill and the whole bill (200 output tokens per call) per experiment at list prices.

    .venv/bin/python benchmarks/llm_caching.py [--experiments 20]
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
MODES = [("anthropic:claude-opus-4-8", False), ("anthropic:claude-opus-4-8", True), ("openai:gpt-5.6", True)]


def history_record(number: int) -> dict:
    return dict(id=f"{number:04d}", status="keep" if number % 4 == 0 else "discard", val_bpb=1.9 - number * 1e-3,
                runs=[{}], triage="ok", description=f"experiment {number}: WARMDOWN_RATIO 0.5 -> {0.5 - number / 100}",
                diff=f"-{WARMDOWN}\n+WARMDOWN_RATIO = {0.5 - number / 100}", commit=f"{number:040d}")


def night(model: str, caching: bool, experiments: int) -> list[dict]:
    """Usage of each experiment's proposal (agent.llm.types.Usage as a dict)."""
    from agent.llm.pricing import PriceTable
    from agent.llm.select import conversation_factory
    from agent.proposers.base import ProposalContext
    from agent.proposers.llm import LLMProposer
    from agent.recording.transcript import Transcript
    from tests.helpers.llm_server import LLMServer, tool_call
    from tests.helpers.submissions import reasoned

    directory = Path(tempfile.mkdtemp(prefix="caching-bench-"))
    shutil.copy(REPO / "trainer" / "prepare.py", directory / "prepare.py")
    train = (REPO / "trainer" / "train.py").read_text()
    program = (REPO / "prompts" / "program.md").read_text()
    change = reasoned({"description": "WARMDOWN_RATIO 0.5 -> 0.4",
                       "edits": [{"old_string": WARMDOWN, "new_string": WARMDOWN.replace("0.5 ", "0.4 ")}]})
    usages = []
    with LLMServer() as server:
        os.environ.update(ANTHROPIC_API_KEY="bench", ANTHROPIC_BASE_URL=server.anthropic_base_url(),
                          OPENAI_API_KEY="bench", OPENAI_BASE_URL=server.openai_base_url())
        proposer = LLMProposer(conversation_factory(model, caching=caching, cache_key="nightly"), directory,
                               PriceTable(), retry_base_s=0.01, outage_window_s=10)
        history = [history_record(0)]
        for number in range(1, experiments + 1):
            server.script(tool_call("read_file", {"path": "train.py"}, thinking="Where is the schedule?"),
                          tool_call("list_experiments", {}, thinking="What was tried?"),
                          tool_call("show_diff", {"experiment_id": history[-1]["id"]}, thinking="The last one."),
                          tool_call("show_diff", {"experiment_id": history[0]["id"]}, thinking="And the first."),
                          tool_call("read_file", {"path": "track.json"}, thinking="The budget?"),
                          tool_call("submit_experiment", change, thinking="A shorter warm-down."))
            context = ProposalContext(track={"track": "gpu", "constants": {"time_budget": 300}}, program_name="program",
                                      program_text=program, train_source=train, best=history[-1], history=history,
                                      experiment_id=f"{number:04d}")
            proposal = proposer.propose(context, Transcript(directory / f"{number:04d}.jsonl"))
            usages.append(proposal.usage)
            history.append(history_record(number))
    shutil.rmtree(directory, ignore_errors=True)
    return usages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=20)
    args = parser.parse_args()
    from rich.console import Console
    from rich.table import Table

    from agent.llm.pricing import PriceTable
    from agent.llm.types import Usage

    table = Table("model", "caching", "input tok/exp", "fresh", "cache write", "cache read", "input $/exp",
                  "total $/exp", "input cost vs uncached", title=f"{args.experiments} experiments, {CALLS} calls each")
    baseline = {}
    for model, caching in MODES:
        usages = night(model, caching, args.experiments)
        n = len(usages)
        total = Usage(**{k: sum(u[k] for u in usages) for k in usages[0]})
        name = model.split(":", 1)[1]
        inputs_only = Usage(input_tokens=total.input_tokens, cache_read_tokens=total.cache_read_tokens,
                            cache_write_tokens=total.cache_write_tokens)
        input_usd = PriceTable().cost(name, inputs_only) / n
        uncached = PriceTable().cost(name, Usage(input_tokens=total.input_tokens)) / n
        baseline.setdefault(model, input_usd if not caching else uncached)
        fresh = total.input_tokens - total.cache_read_tokens - total.cache_write_tokens
        table.add_row(name, "on" if caching else "off", f"{total.input_tokens / n:,.0f}", f"{fresh / n:,.0f}",
                      f"{total.cache_write_tokens / n:,.0f}", f"{total.cache_read_tokens / n:,.0f}",
                      f"${input_usd:.4f}", f"${total.cost_usd / n:.4f}", f"{uncached / input_usd:.1f}x cheaper"
                      if caching else "1.0x")
    Console(width=170).print(table)


if __name__ == "__main__":
    main()
