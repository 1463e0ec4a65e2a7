"""Verifying a would-be keep before it is kept.

train.py prints its own score, and the code that prints it is what the proposer edits. So for
every run of a candidate about to be kept, trainer/evaluate.py re-computes val_bpb in a fresh
process from the weights the run sealed (trainer/seal.py: handed over before any validation
text reached the run), with its own implementation of the metric, and probes the model for
lookahead in every batch it scores. No sealed weights, weights changed since the seal, a lookahead, or a printed number
the weights do not reproduce is tamper. Only would-be keeps pay for this: a fake worse number
gains nothing.
"""

from __future__ import annotations

import time

from agent.judging.evaluator import EvaluationFailed
from agent.recording.record import RunEntry
from agent.running.runner import Runner
from agent.workspace import Workspace
from trainer.hashing import file_sha256

# |trusted - printed| allowed, by device. CPU is fp32 and differs only in summation order and the
# printed rounding (measured below 1e-6); CUDA runs bf16 autocast and a compiled model.
AGREEMENT = {"cpu": 1e-5, "cuda": 2e-3}
LOOKAHEAD_LIMIT = 1e-3  # logits are softcapped at 15; a causal model moves them by 0 (CPU) or bf16 noise
# nats per token between what the model server reported and what its own logits give: the same forward
# pass, so only float32 against float64 rounding (audit), or the same batch run twice (repeat)
CONSISTENCY_LIMIT = 1e-3


def verify_runs(workspace: Workspace, runner: Runner, commit: str, runs: list[RunEntry]) -> tuple[str | None, dict]:
    """(None, evidence) when every run's number is reproduced; else (why it is tamper, evidence)."""
    started, checks = time.monotonic(), []
    evidence = dict(checks=checks)
    for run in runs:
        if run.val_bpb is None:
            continue
        if not run.checkpoint:
            return (f"the run with seed {run.seed} printed val_bpb {run.val_bpb} but sealed no weights through "
                    "prepare.evaluate_bpb, so the number cannot have come from the metric"), evidence
        checkpoint = workspace.dir / run.checkpoint
        if not checkpoint.is_file() or file_sha256(checkpoint) != run.checkpoint_sha256:
            return f"the weights the run with seed {run.seed} sealed were changed or removed since", evidence
        name = "verify-" + run.log.split("/")[-1].removesuffix(".log")
        try:
            scores = runner.evaluate(workspace, commit, checkpoint, name, ("val",), probe=True)
        except EvaluationFailed as err:
            return f"the run with seed {run.seed} cannot be verified: {err}", evidence
        both_cpu = scores["device"] == "cpu" and run.device == "cpu"  # else bf16 somewhere
        tolerance = AGREEMENT["cpu"] if both_cpu else AGREEMENT["cuda"]
        gap = abs(scores["val"] - run.val_bpb)
        checks.append(dict(seed=run.seed, printed=run.val_bpb, trusted=round(scores["val"], 6),
                           gap=gap, tolerance=tolerance, lookahead=scores["lookahead"], probes=scores.get("probes"),
                           audit=scores["audit"],
                           audited_tokens=scores["audited_tokens"], repeat=scores["repeat"], device=scores["device"]))
        if scores["audit"] > CONSISTENCY_LIMIT:
            return (f"the model's reported losses are not what its logits give: up to {scores['audit']:.3g} nats "
                    f"apart on {scores['audited_tokens']} audited tokens (limit {CONSISTENCY_LIMIT})"), evidence
        if scores["repeat"] > CONSISTENCY_LIMIT:
            return (f"the model scores the same rows differently after seeing more text: up to "
                    f"{scores['repeat']:.3g} nats apart (limit {CONSISTENCY_LIMIT})"), evidence
        if scores["lookahead"] > LOOKAHEAD_LIMIT:
            return (f"the model looks ahead: in copies of scored rows whose tokens after a position were replaced, "
                    f"its logits before the first replaced token moved by up to {scores['lookahead']:.3g} (limit "
                    f"{LOOKAHEAD_LIMIT}, {scores.get('probes')} probes)"), evidence
        if gap > tolerance:
            return (f"the run with seed {run.seed} printed val_bpb {run.val_bpb:.6f} but its saved weights "
                    f"score {scores['val']:.6f} (allowed difference {tolerance:g})"), evidence
    evidence["verify_s"] = round(time.monotonic() - started, 3)
    return None, evidence
