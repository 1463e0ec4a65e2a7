"""How far apart honest scorings of the same weights are, emulated on CPU: the order of magnitude that a GPU's
night will measure on its baseline (agent/judging/tolerances.py), where the run prints what its compiled bf16
model computed and the trusted evaluator scores eagerly in bf16, in batches of another shape.

    python benchmarks/tolerance_emulation.py [--track test|cpu] [--cache DIR]

The track's unmodified train.py trains once through the run path (sandboxed, its weights sealed); then its val
rows are scored four ways in one process: float32 eager in the evaluator's CPU batches (16 rows), bfloat16 eager
(CPU autocast) in 16 and in 128 rows (the evaluator's CUDA batches), and bfloat16 compiled (torch.compile, as a
run compiles) in 16 rows. For each pair: |difference| of val_bpb (what the agreement check compares), the largest
difference of one token's loss in nats (what audit and repeat compare, within the evaluator) and of one logit at
the same position (what the lookahead probe compares). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VARIANTS = {"float32 eager, 16 rows": (False, False, 16), "bfloat16 eager, 16 rows": (True, False, 16),
            "bfloat16 eager, 128 rows": (True, False, 128), "bfloat16 compiled, 16 rows": (True, True, 16)}
PAIRS = [("float32 eager, 16 rows", "bfloat16 eager, 16 rows"),
         ("bfloat16 eager, 16 rows", "bfloat16 eager, 128 rows"),
         ("bfloat16 eager, 16 rows", "bfloat16 compiled, 16 rows"),
         ("float32 eager, 16 rows", "bfloat16 compiled, 16 rows")]
LOGIT_POSITIONS = 8  # per row, the same for every variant


def train_once(track: str, cache: Path, work: Path) -> tuple[Path, Path]:
    """The track's train.py trained through the run path; (the commit's directory, the sealed weights)."""
    from trainer.runs.training_run import FROZEN, RunRequest, run_commit
    from trainer.sandbox.untrusted import runs_root
    from trainer.tracks.builder import prepare_track
    from trainer.tracks.hyperparameters import train_source_for_track
    prepared = prepare_track(track, cache=cache, show_progress=False)
    commit = work / "commit"
    commit.mkdir()
    (commit / "train.py").write_text(train_source_for_track((REPO / "trainer" / "train.py").read_text(), track))
    shutil.copy2(REPO / "trainer" / "prepare.py", commit / "prepare.py")
    (commit / "track.json").write_text(json.dumps(prepared.spec))
    files = {name: (commit / name).read_bytes() for name in ("train.py", "prepare.py", "track.json")}
    checkpoint = work / "weights.pt"
    result = run_commit(RunRequest(files=files, seed=42, timeout=3600,
                                   frozen_sha256={n: hashlib.sha256(files[n]).hexdigest() for n in FROZEN},
                                   run_dir=runs_root() / f"emulation-{os.getpid()}" / "0",
                                   log_path=work / "train.log", checkpoint_destination=checkpoint))
    if result.checkpoint is None:
        raise SystemExit(f"the training run sealed no weights: {result.verdict}\n{result.tail}")
    return commit, checkpoint


def measure(checkpoint: Path) -> dict:
    """Run inside the commit's directory: every variant's val_bpb, per-token losses and logits at fixed places."""
    import numpy as np
    import torch
    sys.path.insert(0, str(Path.cwd()))  # the commit's frozen prepare.py and its train.py

    from trainer.evaluator.evaluate import bits_per_byte, packed_rows
    from trainer.evaluator.model_server.model_process import build

    import prepare
    torch.manual_seed(0)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    tokenizer = prepare.Tokenizer.from_directory()
    rows = packed_rows(prepare, tokenizer, "val")
    token_bytes = tokenizer.token_bytes.astype(np.int64)
    positions = np.random.default_rng(0).integers(0, rows.shape[1] - 1, size=(rows.shape[0], LOGIT_POSITIONS))
    found = {}
    for name, (bf16, compiled, batch) in VARIANTS.items():
        model = build(state, torch.device("cpu"))
        forward = torch.compile(model, dynamic=False) if compiled else model
        losses, picked = [], []
        started = time.perf_counter()
        for start in range(0, len(rows), batch):
            chunk = torch.from_numpy(rows[start:start + batch].astype(np.int64))
            with torch.no_grad(), torch.amp.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = forward(chunk[:, :-1]).float()
            losses.append(torch.nn.functional.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten(),
                                                            reduction="none").view(len(chunk), -1).numpy())
            where = torch.from_numpy(positions[start:start + batch])
            picked.append(logits.gather(1, where.unsqueeze(-1).expand(-1, -1, logits.size(-1))).numpy())
        loss = np.concatenate(losses)
        found[name] = dict(bpb=bits_per_byte(loss, rows, token_bytes), losses=loss, logits=np.concatenate(picked),
                           seconds=time.perf_counter() - started)
    return {"rows": int(rows.shape[0]), "cols": int(rows.shape[1]), "variants": {
        name: dict(bpb=v["bpb"], seconds=v["seconds"]) for name, v in found.items()}, "pairs": [
        dict(a=a, b=b, bpb=abs(found[a]["bpb"] - found[b]["bpb"]),
             loss=float(np.abs(found[a]["losses"] - found[b]["losses"]).max()),
             logit=float(np.abs(found[a]["logits"] - found[b]["logits"]).max()),
             largest_logit=float(np.abs(found[a]["logits"]).max())) for a, b in PAIRS]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--track", default="test", choices=("test", "cpu"))
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--measure", type=Path, default=None, help=argparse.SUPPRESS)  # the inner step
    args = parser.parse_args()
    if args.measure is not None:
        print("EMULATION " + json.dumps(measure(args.measure)))
        return
    work = Path(tempfile.mkdtemp(prefix="tolerance-emulation-"))
    work.chmod(0o755)
    cache = (args.cache or Path(os.environ.get("AUTORESEARCH_CACHE") or work / "cache")).expanduser().resolve()
    os.environ.update(AUTORESEARCH_CACHE=str(cache), AUTORESEARCH_TRACK=args.track)
    try:
        commit, checkpoint = train_once(args.track, cache, work)
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", str(checkpoint)],
                              cwd=commit, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                              text=True, timeout=3600)
        line = next((out for out in done.stdout.splitlines() if out.startswith("EMULATION ")), None)
        if line is None:
            raise SystemExit(f"the measurement failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        result = json.loads(line.removeprefix("EMULATION "))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"Track {args.track}, {time.strftime('%Y-%m-%d')}: {result['rows']} val rows of {result['cols']} tokens, "
          "the unmodified train.py trained once.\n")
    print("| scoring | val_bpb | seconds |\n|---|---|---|")
    for name, v in result["variants"].items():
        print(f"| {name} | {v['bpb']:.6f} | {v['seconds']:.1f} |")
    print("\n| pair | val_bpb apart (agreement) | largest token loss apart, nats (audit, repeat) "
          "| largest logit apart (lookahead) | largest logit |\n|---|---|---|---|---|")
    for p in result["pairs"]:
        print(f"| {p['a']} against {p['b']} | {p['bpb']:.2e} | {p['loss']:.2e} | {p['logit']:.2e} "
              f"| {p['largest_logit']:.1f} |")


if __name__ == "__main__":
    main()
