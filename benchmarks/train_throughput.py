"""Training-step throughput of train.py on this machine, with one track's hyperparameters.

train.py runs from a temporary workspace (its track's block written in, beside prepare.py and track.json).
A step is what train.main times: micro-steps of forward+backward up to TOTAL_BATCH_SIZE tokens, then the optimizer.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--track", default="cpu", choices=("cpu", "test", "gpu"))
    parser.add_argument("--steps", type=int, default=10, help="measured optimizer steps per variant")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured steps after the first (cold) one")
    parser.add_argument("--cache", type=Path, default=None, help="cache dir (default $AUTORESEARCH_CACHE)")
    parser.add_argument("--compile", action="store_true",
                        help="also measure the other mode: torch.compile on CPU (eager on CUDA)")
    return parser.parse_args()


def machine(torch) -> str:
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
    else:
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
        name = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")),
                    platform.processor() or "unknown CPU")
    return (f"machine: {name}, {os.cpu_count()} cores ({torch.get_num_threads()} torch threads); "
            f"torch {torch.__version__}; python {platform.python_version()}")


def load_workspace_train(track: str, cache: Path, workspace: Path):
    from trainer.tracks.hyperparameters import train_source_for_track
    source = (REPO / "trainer" / "train.py").read_text()
    (workspace / "train.py").write_text(train_source_for_track(source, track))
    shutil.copy2(REPO / "trainer" / "prepare.py", workspace / "prepare.py")
    shutil.copy2(cache / track / "track.json", workspace / "track.json")
    sys.path.insert(0, str(workspace))
    return importlib.import_module("train")


def autocast(device):
    import torch
    return torch.amp.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def measure(train, model, compiled: bool, tokenizer, device, warmup: int, steps: int) -> dict:
    import torch
    optimizer = train.MuonAdamW(model, device, compile_steps=device.type == "cuda")
    step_model = torch.compile(model, dynamic=False) if compiled else model
    accum = train.TOTAL_BATCH_SIZE // (train.DEVICE_BATCH_SIZE * train.MAX_SEQ_LEN)
    loader = train.make_dataloader(tokenizer, train.DEVICE_BATCH_SIZE, train.MAX_SEQ_LEN, "train", device=device)
    rows = []
    for step in range(1 + warmup + steps):
        data = fwd_bwd = 0.0
        for _ in range(accum):
            train.synchronize(device)
            t0 = time.perf_counter()
            x, y, _ = next(loader)
            train.synchronize(device)
            t1 = time.perf_counter()
            with autocast(device):
                loss = step_model(x, y)
            (loss / accum).backward()
            train.synchronize(device)
            data, fwd_bwd = data + t1 - t0, fwd_bwd + time.perf_counter() - t1
        t0 = time.perf_counter()
        optimizer.set_schedule(train.lr_multiplier(0.0), train.muon_momentum(step), train.WEIGHT_DECAY)
        optimizer.step()
        model.zero_grad(set_to_none=True)
        loss.item()
        train.synchronize(device)
        rows.append((data, fwd_bwd, time.perf_counter() - t0))
        if step == 0:
            gc.collect()
            gc.freeze()
            gc.disable()
    timed = rows[1 + warmup:]
    totals = [sum(r) for r in timed]
    return {"first": sum(rows[0]), "mean": statistics.mean(totals), "min": min(totals),
            "parts": [statistics.mean(r[i] for r in timed) for i in range(3)]}


def main() -> None:
    args = parse_args()
    cache = (args.cache or Path(os.environ.get("AUTORESEARCH_CACHE", "~/.cache/autoresearch"))).expanduser().resolve()
    os.environ["AUTORESEARCH_TRACK"], os.environ["AUTORESEARCH_CACHE"] = args.track, str(cache)
    workspace = tempfile.TemporaryDirectory(prefix="train-bench-")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(workspace.name) / "inductor"))
    import torch
    from rich.console import Console
    from rich.table import Table

    from trainer.tracks.builder import prepare_track

    console = Console(width=120, soft_wrap=True)
    console.print(machine(torch))
    prepared = prepare_track(args.track, cache=cache)
    console.print(f"track {args.track}: {'already prepared' if prepared.reused else 'prepared'} in "
                  f"{prepared.directory}, fingerprint {prepared.spec['fingerprint'][:12]}")
    train = load_workspace_train(args.track, cache, Path(workspace.name))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    on_cuda = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on_cuda
    tokenizer = train.Tokenizer.from_directory()
    config = train.config_from_hyperparameters(tokenizer.get_vocab_size())
    attention, attend, _ = train.choose_attention(device, train.MAX_SEQ_LEN, train.layer_windows(config))

    def fresh_model():
        torch.manual_seed(train.SEED)
        return train.build_model(config, device, attend)

    model = fresh_model()
    console.print(train.describe_model(model, attention))
    flops_per_token, peak, batch = model.flops_per_token(), train.peak_flops(device), train.TOTAL_BATCH_SIZE
    prepare = sys.modules["prepare"]
    num_params = sum(p.numel() for p in model.parameters())
    rows = min(train.DEVICE_BATCH_SIZE, max(1, batch // train.MAX_SEQ_LEN))
    budget_steps = prepare.budget_steps(num_params, config.n_layer, config.n_embd, batch, rows * train.MAX_SEQ_LEN)
    counted = prepare.training_flops_per_token(num_params, config.n_layer, config.n_embd)
    budget = (f"{prepare.FLOPS_BUDGET:.3g} FLOPs at {counted / 1e6:.2f} MFLOP/token as the harness counts them, "
              f"{budget_steps} steps" if prepare.FLOPS_BUDGET else
              f"{budget_steps} steps" if budget_steps else f"{train.TIME_BUDGET} s")
    console.print(f"device {device}; {batch:,} tokens/step = {train.DEVICE_BATCH_SIZE} rows x {train.MAX_SEQ_LEN} x "
                  f"{batch // (train.DEVICE_BATCH_SIZE * train.MAX_SEQ_LEN)} accumulation; "
                  f"{flops_per_token / 1e6:.2f} MFLOP/token; budget {budget}; "
                  f"1 cold + {args.warmup} warm-up + {args.steps} measured steps")

    model.eval()
    start = time.perf_counter()
    with autocast(device):
        bpb = train.evaluate_bpb(torch.compile(model, dynamic=False) if on_cuda else model, tokenizer,
                                 train.DEVICE_BATCH_SIZE)
    train.synchronize(device)
    eval_seconds = time.perf_counter() - start
    model.train()

    results = {on_cuda: measure(train, model, on_cuda, tokenizer, device, args.warmup, args.steps)}
    if args.compile:
        try:
            results[not on_cuda] = measure(train, fresh_model(), not on_cuda, tokenizer, device, args.warmup,
                                           args.steps)
        except Exception as err:  # e.g. no C++ compiler for inductor
            console.print(f"torch.compile failed on {device}: {type(err).__name__}: {str(err)[:300]}")
    modes = list(results)
    table = Table(title=f"track {args.track}: one optimizer step ({batch:,} tokens)")
    table.add_column("measure")
    for compiled in modes:
        table.add_column(("torch.compile" if compiled else "eager") + " (as train.main)" * (compiled == on_cuda),
                         justify="right")
    table.add_column("unit")

    def row(label, unit, value):
        table.add_row(label, *(value(results[c]) for c in modes), unit)

    row("first step (cold)", "s", lambda r: f"{r['first']:.2f}")
    row("step, mean (min)", "ms", lambda r: f"{1e3 * r['mean']:.1f} ({1e3 * r['min']:.1f})")
    for i, part in enumerate(("data fetch", "forward+backward", "optimizer")):
        row(f"  {part}", "ms", lambda r, i=i: f"{1e3 * r['parts'][i]:.1f} ({r['parts'][i] / r['mean']:.0%})")
    row("tokens/s", "tok/s", lambda r: f"{batch / r['mean']:,.0f}")
    row("achieved", "GFLOP/s", lambda r: f"{batch * flops_per_token / r['mean'] / 1e9:,.2f}")
    row("MFU", "%", lambda r: f"{100 * batch * flops_per_token / r['mean'] / peak:.1f}" if peak else "")
    if budget_steps:
        row("seconds for the budget's steps", "s", lambda r: f"{budget_steps * r['mean']:,.1f}")
    else:
        row("steps in the budget", "", lambda r: f"{train.TIME_BUDGET / r['mean']:,.0f}")
    console.print(table)

    if len(modes) == 2:
        eager, fast = results[False], results[True]
        overhead = (fast["first"] - fast["mean"]) - (eager["first"] - eager["mean"])
        payback = (f"after {overhead / (1 - fast['mean'] / eager['mean']):,.0f} s of training"
                   if fast["mean"] < eager["mean"] else "never: compiled steps are not faster")
        console.print(f"compile: cold first step {fast['first']:.1f} s vs {eager['first']:.2f} s eager "
                      f"({overhead:.1f} s extra), steady speed {eager['mean'] / fast['mean']:.2f}x eager; "
                      f"compile pays back {payback} (wall clock). " + (
                          "The budget is steps: compiling changes how soon a run is done, not what it trains."
                          if budget_steps else
                          f"train.main does not count its first {train.WARMUP_STEPS_UNCOUNTED} steps against the "
                          f"{train.TIME_BUDGET} s budget, so within the budget only the steady speed matters."))
    eval_tokens = sys.modules["prepare"].EVAL_TOKENS
    console.print(f"eval (untrained model{', compiled' if on_cuda else ''}): evaluate_bpb over {eval_tokens:,} "
                  f"tokens at batch {train.DEVICE_BATCH_SIZE} took {eval_seconds:.1f} s "
                  f"({eval_tokens / eval_seconds:,.0f} tok/s), val_bpb {bpb:.3f}")
    workspace.cleanup()


if __name__ == "__main__":
    main()
