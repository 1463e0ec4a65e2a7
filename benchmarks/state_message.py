"""Size of the first message of a proposal against the length of the night.

Synthetic nights: every experiment has a realistic description, hypothesis, expectation and lesson
(about 100-200 characters each), a diff that touches one of 26 hyperparameters or one of 12
functions/classes of train.py, about one keep in six, a crash in twenty; notes.md is full (8 KB).
Tokens are estimated at a fixed 3.5 characters per token (agent.proposers.state.groups.CHARS_PER_TOKEN);
tiktoken's encodings cannot be downloaded on a machine without internet.

    python -m benchmarks.state_message
"""

from __future__ import annotations

import random

from rich.console import Console
from rich.table import Table

from agent.proposers.base import ProposalContext
from agent.proposers.state.groups import estimate_tokens
from agent.proposers.state.message import STATE_TOKEN_BUDGET, night_state, state_message
from agent.recording.notes import NOTES_LIMIT, Notes
from agent.recording.record import Evidence, ExperimentRecord, ExperimentStatus, RunEntry
from trainer.tracks.hyperparameters import train_source_for_track
from trainer.tracks.spec import TrackConstants, TrackSpec

PARAMETERS = ["DEPTH", "ASPECT_RATIO", "HEAD_DIM", "WINDOW_PATTERN", "TOTAL_BATCH_SIZE", "DEVICE_BATCH_SIZE",
              "UNEMBEDDING_LR", "EMBEDDING_LR", "VALUE_EMBEDDING_LR", "RESID_LAMBDA_LR", "X0_LAMBDA_LR", "ADAM_BETAS",
              "X0_ADAM_BETAS", "MATRIX_LR", "MUON_MOMENTUM", "NORMUON_BETA2", "WEIGHT_DECAY", "WARMUP_RATIO",
              "WARMDOWN_RATIO", "FINAL_LR_FRAC", "LOGIT_SOFTCAP", "ROTARY_BASE", "VE_GATE_CHANNELS",
              "COMPILE_ON_CPU", "WARMUP_STEPS_UNCOUNTED", "ATTENTION_TOLERANCE"]
DEFINITIONS = ["class CausalSelfAttention(nn.Module):", "class MLP(nn.Module):", "class Block(nn.Module):",
               "class GPT(nn.Module):", "def norm(x):", "def apply_rotary(x, cos, sin):", "class MuonAdamW:",
               "def lr_multiplier(progress: float) -> float:", "def muon_momentum(step: int) -> float:",
               "def polar_express(G: torch.Tensor) -> torch.Tensor:",
               "def build_model(config: GPTConfig, device=\"cpu\", attend=None) -> GPT:", "def main() -> None:"]
PHRASES = ["the warm-down is too short for the number of steps this budget allows",
           "a larger learning rate for the block matrices speeds up the early loss drop",
           "fewer, wider layers make better use of the accelerator at this sequence length",
           "value embeddings on every layer carry more token identity into attention",
           "the logit soft cap limits how confident the head can get early in training"]


def synthetic_record(number: int, rng: random.Random, best: float) -> ExperimentRecord:
    status = "keep" if rng.random() < 1 / 6 else "crash" if rng.random() < 0.05 else "discard"
    if rng.random() < 0.7:
        name = rng.choice(PARAMETERS)
        diff = (f"@@ -40,7 +40,7 @@ X0_LAMBDA_LR = 0.5\n ADAM_BETAS = (0.8, 0.95)\n-{name} = 0.04\n+{name} = "
                f"0.0{rng.randint(1, 9)}\n")
        description = f"{name} 0.04 -> 0.0{rng.randint(1, 9)} (one of the schedule settings, with its numbers)"
    else:
        where = rng.choice(DEFINITIONS)
        diff = f"@@ -130,7 +130,8 @@ {where}\n     x = self.layer(x)\n-    y = f(x)\n+    y = g(x) * self.scale\n"
        description = f"{where.split('(')[0]}: replace f by a scaled g and initialise the scale to one"
    gain = rng.uniform(0.001, 0.006) if status == "keep" else rng.uniform(-0.004, 0.0005)
    value = None if status == "crash" else best - gain
    return ExperimentRecord(id=f"{number:04d}", status=status, commit=f"{number:040x}", proposer="llm",
                description=description, hypothesis=f"{rng.choice(PHRASES)}, so val_bpb should fall at this scale",
                expected=f"val_bpb -{rng.uniform(0.001, 0.005):.3f}, step time {rng.choice(['+2%', '-5%', 'same'])}",
                lesson=f"{number - 1:04d}: {rng.choice(PHRASES)}; the result says the effect is smaller than the "
                       "noise at this depth, so the next try should change it by more",
                lesson_for=f"{number - 1:04d}" if number > 1 else None, diff=diff, val_bpb=value,
                evidence=Evidence(gain=round(gain, 6)) if value is not None else Evidence(),
                reason="mean of 1 run(s) vs best",
                runs=[RunEntry(val_bpb=value)], triage="ok" if value is not None else "oom",
                log_tail="torch.OutOfMemoryError: CUDA out of memory" if value is None else "")


def synthetic_night(length: int, seed: int = 0) -> list[ExperimentRecord]:
    rng = random.Random(seed)
    summary = dict(device="NVIDIA H100 80GB HBM3", device_memory_mb="81559", num_steps="953",
                   tokens_per_second="1661231", peak_vram_mb="45060.2", mfu_percent="39.80", training_seconds="300.1")
    records = [ExperimentRecord(id="0000", status="keep", commit="0" * 40, proposer="baseline",
                                description="baseline", val_bpb=0.998, runs=[RunEntry(val_bpb=0.998)],
                                summary=summary, diff="")]
    best = 0.998
    for number in range(1, length + 1):
        record = synthetic_record(number, rng, best)
        if record.status == ExperimentStatus.KEEP:
            best = record.val_bpb
            record.summary = summary
        records.append(record)
    return records


def main() -> None:
    train = train_source_for_track(open("trainer/train.py").read(), "gpu")
    notes = Notes(text=("- an open question about the warm-down and the depth, with what was seen so far\n" * 200)
                  [:NOTES_LIMIT], size=NOTES_LIMIT)
    table = Table("experiments", "keeps", "state chars", "state tokens (est.)", f"budget {STATE_TOKEN_BUDGET}",
                  "train.py tokens (est.)", "first message tokens (est.)",
                  title="First message of a proposal vs the night's length (notes.md full)")
    for length in (10, 30, 100, 200, 300, 500, 1000):
        records = synthetic_night(length)
        best = [r for r in records if r.status == ExperimentStatus.KEEP][-1]
        constants = TrackConstants.model_construct(time_budget=300, max_seq_len=2048)
        track = TrackSpec.model_construct(track="gpu", fingerprint="f" * 64, constants=constants)
        context = ProposalContext(track=track,
                                  program_name="program", program_text="", train_source=train, best=best,
                                  history=records, experiment_id=f"{length + 1:04d}")
        state = night_state(context, notes)
        table.add_row(str(length), str(sum(r.status == ExperimentStatus.KEEP for r in records) - 1), f"{len(state):,}",
                      f"{estimate_tokens(state):,}", "ok" if estimate_tokens(state) < STATE_TOKEN_BUDGET else "OVER",
                      f"{estimate_tokens(train):,}", f"{estimate_tokens(''.join(state_message(context, notes))):,}")
    Console().print(table)


if __name__ == "__main__":
    main()
