"""A run that dies after it sealed its weights, driven through the real loop on the test track: it is judged on
the trusted evaluator's score of those weights (flagged salvaged), never on a number it printed, and can be kept;
a run that dies before its seal stays a crash."""

import json

from typer.testing import CliRunner

from agent import cli
from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from agent.running.runner import LocalRunner
from tests.helpers.scripted import ScriptedChanges

SOFTCAP = "        logits = LOGIT_SOFTCAP * torch.tanh(logits / LOGIT_SOFTCAP)\n"
# The model runs out of memory on an evaluation batch of more than 8 rows: train.py's own evaluation (16 rows on
# the test track) dies after the seal, and so does the trusted evaluator at its own 16; at half that it scores.
OUT_OF_MEMORY_ON_BIG_BATCHES = SOFTCAP + (
    "        if not self.training and idx.size(0) > 8:\n"
    "            raise RuntimeError('CUDA out of memory. Tried to allocate 20.00 GiB')\n")
BEFORE_EVALUATION = "    model.eval()\n"
FAKE_SUMMARY = '    print("---\\nval_bpb: 0.010000", flush=True)\n' + BEFORE_EVALUATION
CRASH_BEFORE_SEAL = "    raise RuntimeError('CUDA out of memory. Tried to allocate 20.00 GiB')\n" + BEFORE_EVALUATION


def test_a_run_that_dies_after_its_seal_is_judged_on_its_sealed_weights(workspace):
    proposer = ScriptedChanges(
        ("run out of memory before the seal", [(BEFORE_EVALUATION, CRASH_BEFORE_SEAL)]),
        ("print a great number, then run out of memory on evaluation batches of more than 8 rows",
         [(BEFORE_EVALUATION, FAKE_SUMMARY), (SOFTCAP, OUT_OF_MEMORY_ON_BIG_BATCHES)]))
    # No noise floor, and a change within 0.1 of the best is kept: whether a salvaged run can be kept is decided by
    # the keep rule on the evaluator's number, whatever the seed's luck. (A negative --min-delta is refused on the
    # command line, where it would keep regressions; the test builds the settings past that bound.)
    settings = LoopSettings.model_construct(max_experiments=3, noise_seeds=0, min_delta=-0.1, timeout_seconds=900)
    run_loop(workspace, proposer, LocalRunner(), settings, say=lambda _: None)

    baseline, before_seal, salvaged = Ledger(workspace.dir).records
    assert baseline.status == "keep" and not baseline.salvaged

    assert before_seal.status == "crash" and before_seal.triage == "oom", before_seal.reason
    assert not before_seal.salvaged and before_seal.runs[0].checkpoint is None and before_seal.val_bpb is None

    # Its evaluation ran out of memory after the seal, after it printed 0.01: its number is the evaluator's, from
    # a smaller batch, within a seed of the baseline's (it trained the same model), never the one it printed.
    run = salvaged.runs[0]
    assert salvaged.status == "keep" and salvaged.triage == "ok" and salvaged.verified, salvaged.reason
    assert run.salvaged and run.trusted and run.printed is None, run
    assert run.salvaged_from.startswith("oom: out of memory")
    assert run.check.printed == 0.01 and run.val_bpb == run.check.trusted == salvaged.val_bpb
    assert abs(salvaged.val_bpb - baseline.val_bpb) < 0.05
    assert "val_bpb" not in salvaged.summary  # what it printed before it died is not its summary
    assert "salvaged: the run with seed" in salvaged.reason and workspace.head() == salvaged.commit
    events = transcript_events(workspace, salvaged.id)
    assert [(e["salvaged"], e["batch_rows"]) for e in events if e["type"] == "salvage"] == [(True, 8)]
    finished = [e for e in events if e["type"] == "run_finished"]
    assert finished[-1]["salvaged"] and finished[-1]["triage"] == "ok"

    shown = CliRunner(env={"COLUMNS": "1000"}).invoke(
        cli.app, ["status", "--tag", "t", "--workspaces", str(workspace.dir.parent)])
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("ok, salvaged") == 1


def transcript_events(workspace, experiment_id):
    path = workspace.dir / "transcripts" / f"{experiment_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]
