"""What the trusted evaluator costs a night: measured per split on CPU, projected for the gpu track on a GPU.

    python benchmarks/evaluator_cost.py [--tracks test,cpu] [--repeats 3] [--cache DIR]
                                        [--cuda-start 0.5,1,2] [--experiments 100] [--keeps 10]

Measured here, for each CPU track: `python -m trainer.evaluator.evaluate CHECKPOINT --splits val` on an untrained
model of the track (the time of a forward pass does not depend on the weights), sandboxed as a night runs it, the
median of
--repeats after a warm-up; its batches (each a fresh model process) and the model process's start (fork, import
train.py, build, load) timed alone. Projected for the gpu track: the same plan at its shapes (10,240 val rows of
2,048 tokens; on CUDA 128 rows a batch, 16 of them probes, so 92 batches and the repeat), each batch's process
paying a CUDA start of --cuda-start seconds (not measured: no GPU here; scripts/gpu_check.sh reads the real figure
from its night's verifications) plus its forward pass at the reference's training throughput divided by three.
The night: --experiments experiments of 300 s training plus the reference's 26 s around it, of which a would-be
keep, the baseline, each noise-floor run and each close call is scored (3 + 2 x keeps / 5 + 20 + keeps scorings for
100 experiments, as the loop scores them), and the closing confirmation scores the baseline and the best on val
and holdout (4 splits). Prints markdown tables.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.model_server_fork import commit_for, cpu_model, evaluation_seconds, startup_seconds  # noqa: E402

GPU_VAL_ROWS = 40 * 524_288 // 2048
REFERENCE_TOKENS_PER_SECOND = 1.66e6  # training, H100, the reference's published run
RUN_SECONDS = 300 + 26                 # the gpu track's budget and the reference's start-up, compile and eval
CONFIRMATION_SPLITS = 4                # the baseline's and the best's weights on val and holdout


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tracks", default="test,cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--cuda-start", default="0.5,1,2", help="seconds a batch's process spends starting CUDA")
    parser.add_argument("--experiments", type=int, default=100)
    parser.add_argument("--keeps", type=int, default=10)
    return parser.parse_args()


def scorings(experiments: int, keeps: int) -> float:
    """Splits the loop scores in a night: the baseline, the noise floors' runs, close calls, would-be keeps."""
    return (3 + 2 * keeps / 5 + 20 * experiments / 100 + keeps) + CONFIRMATION_SPLITS


def measure(tracks: list[str], repeats: int, cache_arg: Path | None) -> list[tuple]:
    from trainer.evaluator.evaluate import BATCH_ROWS, PROBES_PER_BATCH
    from trainer.prepare import TRACKS
    from trainer.tracks.builder import prepare_track
    work = Path(tempfile.mkdtemp(prefix="evaluator-cost-"))
    work.chmod(0o755)  # the sandboxed server's uid must reach the commits
    cache = (cache_arg or Path(os.environ.get("AUTORESEARCH_CACHE") or work / "cache")).expanduser().resolve()
    measured = []
    try:
        for track in tracks:
            env = {**os.environ, "AUTORESEARCH_CACHE": str(cache), "AUTORESEARCH_TRACK": track}
            os.environ.update(AUTORESEARCH_CACHE=str(cache))
            prepared = prepare_track(track, cache=cache, show_progress=False)
            commit, checkpoint = commit_for(track, prepared, work, env)
            rows = TRACKS[track]["eval_tokens"] // TRACKS[track]["max_seq_len"]
            batches = math.ceil(rows / (BATCH_ROWS - PROBES_PER_BATCH)) + 1
            start = startup_seconds(commit, checkpoint, env)
            times = []
            for repeat in range(repeats + 1):
                seconds = evaluation_seconds(commit, checkpoint, env, REPO)
                print(f"{track}: {seconds:.1f} s{' (warm-up)' * (repeat == 0)}", file=sys.stderr, flush=True)
                if repeat:
                    times.append(seconds)
            measured.append((track, rows, batches, statistics.median(times), start))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return measured


def main() -> None:
    args = parse_args()
    from trainer.evaluator.evaluate import BATCH_ROWS, CUDA_BATCH_SCALE, PROBES_PER_BATCH
    from trainer.sandbox.isolation import isolation
    measured = measure(args.tracks.split(","), args.repeats, args.cache)
    print(f"Machine: {cpu_model()}, {time.strftime('%Y-%m-%d')}; model server "
          f"{'sandboxed (bwrap)' if isolation().available else 'NOT sandboxed'}; median of {args.repeats}.\n")
    print("| track | val rows | batches (+ repeat) | one split | per batch | model process start |")
    print("|---|---|---|---|---|---|")
    for track, rows, batches, seconds, start in measured:
        print(f"| {track} | {rows} | {batches} | {seconds:.1f} s | {1000 * seconds / batches:.0f} ms "
              f"| {1000 * start:.0f} ms |")

    rows_per_batch, probes = BATCH_ROWS * CUDA_BATCH_SCALE, PROBES_PER_BATCH * CUDA_BATCH_SCALE
    batches = math.ceil(GPU_VAL_ROWS / (rows_per_batch - probes)) + 1
    forward = rows_per_batch * 2048 / (3 * REFERENCE_TOKENS_PER_SECOND)
    splits = scorings(args.experiments, args.keeps)
    training = args.experiments * RUN_SECONDS
    print(f"\nProjected, gpu track on an H100: {batches} batches of {rows_per_batch} rows a split, a forward pass of "
          f"{forward:.2f} s each; {splits:.0f} split scorings in a night of {args.experiments} experiments with "
          f"{args.keeps} keeps, against {training / 3600:.1f} GPU-hours of runs.\n")
    print("| CUDA start per process | one split | the night's scorings | share of the night's GPU time | "
          "experiments/hour (K=1) |")
    print("|---|---|---|---|---|")
    for cuda_start in (float(part) for part in args.cuda_start.split(",")):
        split = batches * (cuda_start + forward)
        night = splits * split
        share = night / (training + night)
        print(f"| {cuda_start:g} s | {split / 60:.1f} min | {night / 3600:.2f} h | {100 * share:.1f}% | "
              f"{3600 * args.experiments / (training + night):.2f} |")


if __name__ == "__main__":
    main()
