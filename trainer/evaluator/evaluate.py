"""The harness's own evaluation of a trained model, from the weights its run sealed.

Run from an exported commit (train.py and the frozen prepare.py as cwd) in a fresh process:

    python -m trainer.evaluator.evaluate CHECKPOINT --splits val,holdout [--probe] [--batch-rows N] [--result-fd FD]

This process never imports train.py (nor can the model read its memory: not dumpable). It reads the rows,
computes the metric and judges the answers of the model, served by trainer/evaluator/model_server/server.py,
sandboxed, a fresh process per batch (server.py and docs/security.md, "The trusted number decides", say what
it sees): the model sees only the rows it is sent.

What the model server says is checked (an answer holding a NaN or a +inf, or a loss of -inf, fails the
server, as does a check's difference that is no number: max() would pass a NaN over):
- audit: once it has reported the per-token losses of a batch, it is asked for its logits at
  AUDIT_POSITIONS random positions of every row, and those losses are re-computed here. To
  gain anything a misreport must touch many tokens, so it is caught almost surely.
- repeat: the first batch of a split is scored again at the end (by another fresh process); a
  model that adapts to the text it has been shown scores it differently.
- probe: every batch has BATCH_ROWS rows (x CUDA_BATCH_SCALE on CUDA, where each batch's process
  pays for starting CUDA), of which PROBES_PER_BATCH (scaled alike) or more are copies of rows
  scored in other batches with the tokens after a random position t replaced by another row's,
  in random places among the scored rows. The logits just before the first replaced token must
  be the original's (they are audited like any other position): a model that looks ahead moves
  them, and it cannot tell a probe from a scored row by the size or the shape of a batch.
  --batch-rows asks for smaller batches (the memory a batch's forward pass needs goes with its
  rows), with probes in the same share, one at least.

Bits per byte are computed here: nats over targets that are real bytes / (ln 2 x their bytes),
over the same rows evaluate_bpb scores. The Evaluation goes to the pipe --result-fd names (evaluation.py says why).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import secrets
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer.evaluator.evaluation import RESULT_FD_FLAG, SPLITS, Evaluation
from trainer.sandbox.untrusted import not_dumpable

BATCH_ROWS = 16
AUDIT_POSITIONS = 8  # per row of every batch
PROBES_PER_BATCH = 2  # perturbed copies of rows scored in other batches, at least, in every batch
CUDA_BATCH_SCALE = 8  # on CUDA: 128 rows, 16 probes a batch, as each batch's fresh process starts CUDA anew
MIN_BATCH_ROWS = 2  # a scored row and a probe
SERVER_LOG = "model_server.log"  # in the run directory; its end is printed if the server fails
STOP_SECONDS = 5.0  # for the server to clear its last batch once the requests end


class ServerFailed(Exception):
    """The model server died or answered outside the protocol."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--splits", default="val,holdout", help="comma-separated: val, holdout")
    parser.add_argument("--probe", action="store_true", help="accepted for old callers: every batch carries probes")
    parser.add_argument("--batch-rows", type=int, default=None,
                        help=f"rows a batch sends the model (default {BATCH_ROWS}, x{CUDA_BATCH_SCALE} on CUDA); fewer "
                             "need less memory")
    parser.add_argument(RESULT_FD_FLAG, type=int, default=None, help="a pipe's write end to hand the result to")
    args = parser.parse_args(argv)
    splits = args.splits.split(",")
    if "val" not in splits or not set(splits) <= set(SPLITS):
        parser.error(f"--splits must name val and may name holdout, got {args.splits!r}")
    if args.batch_rows is not None and args.batch_rows < MIN_BATCH_ROWS:
        parser.error(f"--batch-rows must be at least {MIN_BATCH_ROWS} (a scored row and a probe), "
                     f"got {args.batch_rows}")
    not_dumpable()
    if args.result_fd is not None:
        os.set_inheritable(args.result_fd, False)  # the model server never holds it
    sys.path.insert(0, str(Path.cwd()))  # the exported commit's frozen prepare.py (never its train.py)
    device = "cuda" if cuda_devices() else "cpu"
    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    print(f"evaluator: the model server runs on {device}"
          + (f" (CUDA_VISIBLE_DEVICES={shown})" if shown is not None else ""), flush=True)
    server = ModelServer(args.checkpoint, device, args.batch_rows)  # starts while the rows are read

    import numpy as np

    import prepare
    tokenizer = prepare.Tokenizer.from_directory()
    token_bytes = tokenizer.token_bytes.astype(np.int64)
    rows = {split: packed_rows(prepare, tokenizer, split) for split in splits}
    worst = Worst()
    bits: dict[str, float] = {}
    try:
        with server:
            server.vocab = tokenizer.get_vocab_size()
            for split in splits:
                scored = score(server, rows[split], worst)
                bits[split] = bits_per_byte(scored, rows[split], token_bytes)
                print(f"{split}: {bits[split]:.6f}", flush=True)
            print(f"audit: {worst.audit:.3g} over {worst.audited_tokens} tokens; repeat: {worst.repeat:.3g}; "
                  f"lookahead: {worst.lookahead:.3g} over {worst.probes} probes", flush=True)
    except ServerFailed as err:
        print(f"the model server failed: {err}")
        log = Path(SERVER_LOG)
        for line in (log.read_text(errors="replace").splitlines()[-30:] if log.exists() else []):
            print(f"model| {line}")
        return 1
    evaluation = Evaluation(device=device, val=bits["val"], holdout=bits.get("holdout"), **asdict(worst))
    if args.result_fd is not None:  # the harness's pipe, closed once written
        with os.fdopen(args.result_fd, "w") as pipe:
            pipe.write(evaluation.model_dump_json(exclude_none=True))
    print("evaluator: done", flush=True)
    return 0


@dataclass
class Worst:  # the worst each check of the model server's answers has seen so far (see Evaluation)
    audit: float = 0.0
    audited_tokens: int = 0
    repeat: float = 0.0
    lookahead: float = 0.0
    probes: int = 0


def cuda_devices() -> int:
    """How many CUDA devices the driver shows this process, asked without importing torch."""
    import ctypes
    with contextlib.suppress(OSError):
        driver, count = ctypes.CDLL("libcuda.so.1"), ctypes.c_int(0)
        return count.value if driver.cuInit(0) == 0 and driver.cuDeviceGetCount(ctypes.byref(count)) == 0 else 0
    return 0


def packed_rows(prepare, tokenizer, split: str):
    """The first rows of a split as evaluate_bpb packs them (MAX_SEQ_LEN + 1 tokens each)."""
    packer = prepare.BestFitPacker(tokenizer, prepare.iter_documents(prepare.split_files(split)),
                                   prepare.MAX_SEQ_LEN + 1)
    return packer.rows(prepare.EVAL_TOKENS // prepare.MAX_SEQ_LEN)


def bits_per_byte(losses, rows, token_bytes) -> float:
    nbytes = token_bytes[rows[:, 1:]]
    return float((losses.astype("float64") * (nbytes > 0)).sum() / (math.log(2) * nbytes.sum()))


def cross_entropy(logits, targets):
    import numpy as np
    logits = logits.astype(np.float64)
    top = logits.max(axis=-1, keepdims=True)
    log_total = np.log(np.exp(logits - top).sum(axis=-1)) + top[..., 0]
    return log_total - np.take_along_axis(logits, targets[..., None].astype(np.int64), axis=-1)[..., 0]


def audit(server: ModelServer, batch, reported, must_see: list[set[int]], worst: Worst):
    """Asks for the logits at AUDIT_POSITIONS positions per row that the server learns only after reporting
    (random, plus the probe positions in must_see) and re-computes the losses there; records the largest
    difference in worst."""
    import numpy as np
    draw = secrets.SystemRandom()
    chosen = []
    for wanted in must_see:
        picked = set(list(wanted)[:AUDIT_POSITIONS])
        picked.update(draw.sample([p for p in range(batch.shape[1] - 1) if p not in picked],
                                  AUDIT_POSITIONS - len(picked)))
        chosen.append(sorted(picked))
    positions = np.array(chosen, dtype=np.int64)
    logits = server.ask("picked", positions)
    targets = np.take_along_axis(batch[:, 1:], positions, axis=1)
    worst.audit = worst_of(worst.audit, cross_entropy(logits, targets), np.take_along_axis(reported, positions, axis=1),
                           "audit")
    worst.audited_tokens += batch.shape[0] * AUDIT_POSITIONS
    return positions, logits


@dataclass
class Probe:
    """A copy of scored row `original` whose tokens after position t come from another row: the model's
    logits at `position` (the last one before the first changed token) must be those of the original."""
    original: int
    row: object          # the perturbed copy
    position: int
    seen: object = None  # the logits at `position` of whichever of the two was scored first


def batch_layout(device: str, rows: int | None = None) -> tuple[int, int]:
    """(rows, probes at least) of every batch on device; of `rows` rows where asked, with probes in the ordinary
    share of them (at least one)."""
    if rows is None:
        scale = CUDA_BATCH_SCALE if device == "cuda" else 1
        return BATCH_ROWS * scale, PROBES_PER_BATCH * scale
    if rows < MIN_BATCH_ROWS:
        raise ValueError(f"a batch needs at least {MIN_BATCH_ROWS} rows (a scored row and a probe), not {rows}")
    return rows, max(1, rows * PROBES_PER_BATCH // BATCH_ROWS)


def plan_batches(rows, draw: secrets.SystemRandom, batch_rows: int = BATCH_ROWS,
                 probes_per_batch: int = PROBES_PER_BATCH) -> list[tuple[list[int], list[Probe]]]:
    """The split's rows in batches of batch_rows: batch_rows - probes_per_batch scored rows each (the
    last batch fewer) and perturbed copies of rows scored in other batches to fill every batch."""
    count = len(rows)
    per_batch = batch_rows - probes_per_batch
    batches = [list(range(i, min(i + per_batch, count))) for i in range(0, count, per_batch)]
    used: set[int] = set()
    plan = []
    for scored in batches:
        wanted, probes = batch_rows - len(scored), []
        for _ in range(100 * wanted):  # rows not used yet, scored in another batch, drawn at random
            if len(probes) == wanted:
                break
            original = draw.randrange(count)
            if original not in used and not scored[0] <= original <= scored[-1]:
                used.add(original)
                probes.append(perturbed(rows, original, draw))
        while len(probes) < wanted:  # a split too small for that: any row again
            probes.append(perturbed(rows, draw.randrange(count), draw))
        plan.append((scored, probes))
    return plan


def perturbed(rows, original: int, draw: secrets.SystemRandom) -> Probe:
    copy = rows[original].copy()
    for _ in range(8):
        t = draw.randrange(1, rows.shape[1] - 2)
        donor = rows[draw.randrange(len(rows))]
        copy[t + 1:] = donor[t + 1:]
        changed = (copy != rows[original]).nonzero()[0]
        if len(changed):
            return Probe(original, copy, int(changed[0]) - 1)
    return Probe(original, copy, -1)  # no other row differs: an ordinary row, nothing to compare


def score(server: ModelServer, rows, worst: Worst):
    """Per-token losses of every row, asked in batches that each carry probes; updates worst with what its
    checks saw."""
    import numpy as np
    draw = secrets.SystemRandom()
    losses = np.zeros((rows.shape[0], rows.shape[1] - 1), dtype=np.float32)
    pending: dict[int, list[Probe]] = {}  # scored row -> the probes of it whose copy is in another batch
    plan = plan_batches(rows, draw, *batch_layout(server.device, server.batch_rows))
    for probe in (probe for _, probes in plan for probe in probes if probe.position >= 0):
        pending.setdefault(probe.original, []).append(probe)
    first = None
    for scored, probes in plan:
        members = [(index, None) for index in scored] + [(None, probe) for probe in probes]
        draw.shuffle(members)
        batch = np.stack([rows[i] if i is not None else p.row for i, p in members])
        reported = server.ask("losses", batch)
        first = first or (batch, reported)
        must_see = [{p.position for p in pending.get(i, [])} if i is not None else
                    ({p.position} if p.position >= 0 else set()) for i, p in members]
        positions, logits = audit(server, batch, reported, must_see, worst)
        for row, (index, probe) in enumerate(members):
            if index is not None:
                losses[index] = reported[row]
            for one in ([probe] if probe is not None else pending.get(index, [])):
                if one.position not in positions[row]:
                    continue
                seen = logits[row, list(positions[row]).index(one.position)]
                if one.seen is None:
                    one.seen = seen
                else:
                    worst.lookahead = worst_of(worst.lookahead, one.seen, seen, "lookahead")
                    worst.probes += 1
                    one.seen = None
    worst.repeat = worst_of(worst.repeat, server.ask("losses", first[0]), first[1], "repeat")
    return losses


def worst_of(worst: float, these, those, check: str) -> float:
    """The larger of worst and the largest difference between these and those, equal values (infinities too)
    differing by 0. A difference that is no number fails the server: max() would pass a NaN over as smaller."""
    import numpy as np
    with np.errstate(invalid="ignore"):
        gap = float(np.where(these == those, 0.0, np.abs(these - those)).max())
    if not math.isfinite(gap):
        raise ServerFailed(f"its answers left the {check} check a difference that is no number ({gap})")
    return max(worst, gap)


class ModelServer:
    """trainer/evaluator/model_server/server.py in its sandbox, and the client side of its protocol."""

    def __init__(self, checkpoint: Path, device: str, batch_rows: int | None = None):
        from trainer.prepare import cache_root
        from trainer.sandbox.seal import data_paths, hidden_paths
        from trainer.sandbox.untrusted import isolated_command, isolation_available
        self.device, self.batch_rows = device, batch_rows  # batch_rows None: batch_layout's for the device
        self.vocab = 1  # the smallest vocabulary a logits answer may have; set once the tokenizer is read
        command = [sys.executable, "-m", "trainer.evaluator.model_server.server", str(checkpoint), "--device", device]
        with open(SERVER_LOG, "wb") as log:
            if isolation_available():  # its log (in the working directory it is shown) hidden: a batch's process
                cache = cache_root()  # must not read what an earlier one printed; /tmp for CUDA's compiler only
                command = isolated_command([*command, "--sandboxed"], data_paths(cache),
                                           [*hidden_paths(cache), Path(SERVER_LOG).resolve()],
                                           writable_tmp=device == "cuda")
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                            env=os.environ.copy())

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(self, *exc) -> None:
        """Ends the requests, so that the server kills its last batch's processes (unsandboxed they are its own
        to kill), then kills it: nothing it does after the last answer matters."""
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.process.stdin.close()
            self.process.wait(timeout=STOP_SECONDS)
        self.process.kill()
        self.process.wait()

    def ask(self, op: str, rows):
        """The server's answer for rows (count x cols tokens), checked for the shape the protocol says."""
        import numpy as np
        count, cols = rows.shape
        try:
            self.process.stdin.write(json.dumps(dict(op=op, rows=count, cols=cols)).encode() + b"\n")
            self.process.stdin.write(rows.astype("<i4").tobytes())
            self.process.stdin.flush()
            header = self.process.stdout.readline(1000)
            shape = [int(n) for n in json.loads(header)["shape"]] if header else None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ServerFailed(f"no valid answer to {op} ({err})") from err
        expected = {"losses": [count, cols - 1], "picked": [count, cols]}[op]
        if shape is None or shape[:2] != expected or len(shape) != (2 if op == "losses" else 3) \
                or (op != "losses" and not self.vocab <= shape[-1] <= 1 << 20):
            raise ServerFailed(f"answered {op} with shape {shape}, expected {expected}"
                               + ("" if op == "losses" else " x a vocabulary"))
        size = 4 * math.prod(shape)
        data = self.process.stdout.read(size)
        if len(data) != size:
            raise ServerFailed(f"answered {op} with {len(data)} of {size} bytes")
        answer = np.frombuffer(data, dtype="<f4").reshape(shape)
        # a logit may be -inf (a token ruled out); no number may be NaN or +inf, and a loss must be finite
        if np.isnan(answer).any() or np.isposinf(answer).any() or (op == "losses" and np.isneginf(answer).any()):
            raise ServerFailed(f"answered {op} with NaN or an infinity")
        return answer


if __name__ == "__main__":
    sys.exit(main())
