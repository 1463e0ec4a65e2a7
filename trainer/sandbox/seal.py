"""The validation seal: a training process reads validation text only after its weights are out of its reach.

A run is given a data directory with the track's training split and tokenizer only
(``training_view``), and one end of a socket pair whose number is in ``AUTORESEARCH_SEAL_FD``.
prepare.evaluate_bpb saves the weights, then sends ``seal val``; the harness (``Seal``) moves
the weights out of the run directory, hashes them, copies the val files into the run directory
and answers ``open <dir>``. The weights of record are fixed before any validation text exists in
the process, so nothing learnt from it can reach the number the verifier re-computes. A run
seals once; the holdout split never opens.

The harness, not the run, owns the budget: the seal request is timed here from the run's start (on
a track whose budget clock is CPU time, the cpu track of workspaces made before it counted FLOPs, the
CPU seconds the kernel charged to the run's processes are read from /proc), and carries the training
tokens the run's frozen prepare.py handed out (times the sealed weights' FLOPs per token on a
FLOPs-budgeted track); a run past its track's budget (RunBudget) is refused, and its record is an
``over_budget`` crash. Requests are read in lines of at most MAX_REQUEST_BYTES. Where runs are isolated
(trainer/sandbox/untrusted.py) the cache's own val and holdout directories are hidden as well.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainer.files.hashing import file_sha256
from trainer.prepare import SEAL_FD_VAR
from trainer.sandbox.untrusted import Ending
from trainer.tracks.spec import TrackConstants

SEALED_SPLITS = ("val", "holdout")
OPENED_DIR = "opened"   # in the run directory: the val files, copied there at the seal
VIEW_DIR = "data"       # in the run directory: what the run sees as its cache


def training_view(track_dir: Path, run_dir: Path) -> Path:
    """A cache root for the run holding <track>/{track.json, tokenizer/, train/} and no other split.

    The tokenizer and track.json are copied; the training shards are hard-linked (symlinked across
    file systems), so the view does not name where the rest of the cache is."""
    view = run_dir / VIEW_DIR / track_dir.name
    (view / "train").mkdir(parents=True)
    if not (track_dir / "track.json").is_file():
        return view.parent  # not prepared: the run says so, as it would on the cache itself
    shutil.copy2(track_dir / "track.json", view / "track.json")
    shutil.copytree(track_dir / "tokenizer", view / "tokenizer")
    for shard in (track_dir / "train").iterdir():
        try:
            os.link(shard, view / "train" / shard.name)
        except OSError:
            (view / "train" / shard.name).symlink_to(shard)
    return view.parent


def data_paths(cache: Path) -> list[Path]:
    """The prepared tracks of a cache: read-only for an isolated run (the compile cache beside them is not)."""
    return sorted(d for d in cache.iterdir() if (d / "track.json").is_file()) if cache.is_dir() else []


def hidden_paths(cache: Path) -> list[Path]:
    """What an isolated run must not see of the real cache: every track's sealed splits, the raw downloads."""
    found = [d for track in cache.iterdir() if track.is_dir() for d in (track / s for s in SEALED_SPLITS)
             if d.is_dir()] if cache.is_dir() else []
    downloads = cache / "downloads"
    return found + ([downloads] if downloads.is_dir() else [])


# A run reaches the seal after its startup, compilation and warm-up steps as well as the budgeted training:
# on a timed track the harness allows half the budget (at least a minute, wall-clock or CPU) on top of it. The
# reference spends ~26 s of its 300 s budget's run on startup, compilation and evaluation on an H100.
STARTUP_ALLOWANCE = 0.5
MIN_STARTUP_ALLOWANCE_S = 60.0
MAX_REQUEST_BYTES = 4096  # a seal request is one short line; a run that sends more is cut off
OVER_BUDGET = "over budget: "  # the start of a refusal for a run that trained longer than its track allows
EVALUATED = "evaluated"  # said by evaluate_bpb once the metric is computed: the run may end now
# After the evaluation was handed over a run has SUMMARY_GRACE_S to print its summary; a run that never says
# so is ended POST_SEAL_SHARE of its time to the seal (at least POST_SEAL_MIN_S) after its seal. Nothing it does
# after the seal can change its sealed weights, so nothing it does there may cost the slot either.
SUMMARY_GRACE_S = 15.0
POST_SEAL_SHARE, POST_SEAL_MIN_S = 0.5, 120.0
REQUEST = re.compile(r"seal (\w{1,16})(?: trained_tokens=(\d{1,18}))?")
COUNTED_DTYPES = ("torch.float32", "torch.bfloat16", "torch.float16")  # as str(dtype): no torch at import


@dataclass(frozen=True)
class RunBudget:
    """What a run may consume before it seals: seconds from its start (measured here, outside the run) on a
    wall-clock track; CPU seconds of its processes (read from the kernel) on a CPU-clock one; training tokens drawn
    through make_dataloader (reported by the run's frozen prepare.py) on a step-budgeted one; on a FLOPs-budgeted
    one, those tokens times the training FLOPs per token of the weights it sealed, counted here
    (prepare.training_flops_per_token): nothing train.py declares widens it."""
    seconds: float | None = None
    tokens: int | None = None
    cpu_seconds: float | None = None
    flops: float | None = None
    problem: str | None = None  # why this run's budget cannot be known: every seal is refused with it

    @classmethod
    def of_run(cls, constants: TrackConstants, run_dir: Path) -> RunBudget:
        """The track's budget; on a step-budgeted track, its steps at the batch train.py declares in its
        hyperparameter block before the run starts (the one train.py in the run directory)."""
        if constants.budget == "flops":
            return cls(flops=constants.flops_budget)
        if constants.budget != "steps":
            allowed = constants.time_budget + max(STARTUP_ALLOWANCE * constants.time_budget, MIN_STARTUP_ALLOWANCE_S)
            return cls(cpu_seconds=allowed) if constants.budget == "cpu" else cls(seconds=allowed)
        try:
            batch = declared_batch_tokens((run_dir / "train.py").read_text())
        except (OSError, ValueError):
            batch = None
        if batch is None:
            return cls(problem="the step budget counts steps of TOTAL_BATCH_SIZE tokens, which train.py must "
                               "assign once, at the top level, as a whole number (2**11 or 2048)")
        return cls(tokens=(constants.step_budget + 1) * batch)  # + 1: the batch drawn ahead of the last step


def declared_batch_tokens(source: str) -> int | None:
    """TOTAL_BATCH_SIZE where train.py binds that name exactly once, in a top-level `TOTAL_BATCH_SIZE = <literal>`;
    None where it binds it anywhere else or more often (annotated, augmented, in a function, imported, declared
    global), or not as a literal."""
    import ast

    from trainer.files.parsing import parse
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return None
    name = "TOTAL_BATCH_SIZE"
    bindings = [node for node in ast.walk(tree) if (
        isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load)
        or isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names
        or isinstance(node, ast.alias) and (node.asname or node.name) == name
        or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name
        or isinstance(node, ast.arg) and node.arg == name
        or isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name == name)]
    top = [node for node in tree.body if isinstance(node, ast.Assign) and len(node.targets) == 1
           and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name]
    if len(bindings) != 1 or len(top) != 1:
        return None
    try:
        value = ast.literal_eval(top[0].value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = _power(top[0].value) if isinstance(top[0].value, ast.BinOp) and isinstance(top[0].value.op,
                                                                                            ast.Pow) else None
    return value if isinstance(value, int) and 0 < value < 1 << 40 else None


def _power(node) -> int | None:
    import ast
    try:
        base, exponent = ast.literal_eval(node.left), ast.literal_eval(node.right)
    except (ValueError, SyntaxError, TypeError):
        return None
    return base ** exponent if isinstance(base, int) and isinstance(exponent, int) and 0 <= exponent < 40 else None


@dataclass
class Sealed:
    checkpoint: Path | None = None   # where the weights were moved at the seal
    sha256: str | None = None
    problem: str | None = None       # a refused request, for the run's record
    seconds: float | None = None     # from the run's start to its seal request, measured by the harness
    cpu_seconds: float | None = None  # CPU seconds of the run's processes at its seal request, read by the harness
    trained_tokens: int | None = None  # what the run's prepare.py reported make_dataloader handed out
    harness_failed: str | None = None  # the harness itself could not seal (its disk is full): not the run's doing
    flops: float | None = None       # training FLOPs counted at the seal, on a FLOPs-budgeted track


class Seal:
    """The harness's side of one run's seal, served from a thread while the run lives."""

    def __init__(self, run_dir: Path, track_dir: Path, constants: TrackConstants, checkpoint_name: str,
                 destination: Path, budget: RunBudget | None = None):
        self.run_dir, self.track_dir, self.seq_len = run_dir, track_dir, constants.max_seq_len
        self.checkpoint, self.destination = run_dir / checkpoint_name, destination
        self.budget = budget or RunBudget.of_run(constants, run_dir)
        self.result = Sealed()
        self._ours, self._theirs = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name=f"seal-{run_dir.name}", daemon=True)
        self._serving = False
        self._started = time.monotonic()
        self._pid: int | None = None
        self.sealed_at: float | None = None     # monotonic time the weights were handed over
        self.evaluated_at: float | None = None  # monotonic time the sealed run said its evaluation was over
        self.at_request: Callable[[], None] | None = None  # called when the run asks for its seal (the log marks it)

    def env(self) -> dict[str, str]:
        return {SEAL_FD_VAR: str(self._theirs.fileno())}

    @property
    def child_fd(self) -> int:
        return self._theirs.fileno()

    def started(self, pid: int | None = None) -> None:
        """Call once the run's process (pid: the one started, whose descendants are the run) holds its end:
        from then on, EOF means the run has exited."""
        self._started, self._pid = time.monotonic(), pid
        self._theirs.close()
        self._thread.start()
        self._serving = True

    def finish(self) -> Sealed:
        self._theirs.close()
        if self._serving:
            self._thread.join(timeout=30)
        self._ours.close()
        return self.result

    def ending(self) -> Ending | None:
        """When the harness ends the run (untrusted.py): once its weights are sealed, see SUMMARY_GRACE_S."""
        if self.evaluated_at is not None:
            return Ending(self.evaluated_at + SUMMARY_GRACE_S, f"stopped {SUMMARY_GRACE_S:.0f} s after its "
                          "evaluation was handed over: what it printed until then is its result", True)
        if self.sealed_at is not None:
            allowance = max(POST_SEAL_MIN_S, POST_SEAL_SHARE * (self.sealed_at - self._started))
            return Ending(self.sealed_at + allowance, f"stopped {allowance:.0f} s after it sealed its weights, its "
                          "evaluation not handed over", False)
        return None

    def _serve(self) -> None:
        with contextlib.suppress(OSError):  # the run hung up or reset the socket: it has nothing more to ask
            self._serve_requests()

    def _serve_requests(self) -> None:
        with self._ours.makefile("rb") as requests, self._ours.makefile("wb") as answers:
            while line := requests.readline(MAX_REQUEST_BYTES + 1):
                if not line.endswith(b"\n"):
                    self._refuse(f"a request of more than {MAX_REQUEST_BYTES} bytes without a newline; "
                                 "the seal stopped listening" if len(line) > MAX_REQUEST_BYTES else
                                 "an unfinished request")
                    self._ours.shutdown(socket.SHUT_RDWR)  # the run's further writes fail instead of blocking
                    return
                request = line.decode("utf-8", errors="replace").strip()
                if request == EVALUATED:
                    if self.result.checkpoint is not None and self.evaluated_at is None:
                        self.evaluated_at = time.monotonic()
                    continue
                try:
                    answer = self._answer(request, time.monotonic())
                except OSError as err:  # moving the weights or copying val failed: the harness's own disk
                    self.result.harness_failed = f"sealing the weights failed: {err}"
                    answer = self._refuse(self.result.harness_failed)
                answers.write(answer.encode() + b"\n")
                answers.flush()

    def _answer(self, request: str, at: float) -> str:
        asked = REQUEST.fullmatch(request)
        if not asked or asked.group(1) != "val":
            return self._refuse("a request other than `seal val` (only that one is served)")
        if self.result.checkpoint is not None or self.result.seconds is not None:
            return self._refuse("the run already sealed its weights once; evaluate_bpb runs once per run")
        self.result.seconds = round(at - self._started, 3)
        if self.at_request is not None:  # before any validation text exists in the run directory
            self.at_request()
        if self._pid is not None:
            self.result.cpu_seconds = round(process_tree_cpu_seconds(self._pid), 3)
        self.result.trained_tokens = int(asked.group(2)) if asked.group(2) else None
        if over := self._over_budget():
            return self._refuse(OVER_BUDGET + over)
        if self.checkpoint.is_symlink() or not self.checkpoint.is_file():
            return self._refuse("no weights were saved before the seal (AUTORESEARCH_CHECKPOINT)")
        self.destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(self.checkpoint, self.destination)
        if over := self._over_flops():
            self.destination.unlink(missing_ok=True)
            return self._refuse(OVER_BUDGET + over)
        self.result.checkpoint, self.result.sha256 = self.destination, file_sha256(self.destination)
        opened = self.run_dir / OPENED_DIR / self.track_dir.name
        opened.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.track_dir / "track.json", opened / "track.json")
        shutil.copytree(self.track_dir / "val", opened / "val")
        self.sealed_at = time.monotonic()
        return f"open {opened}"

    def _over_budget(self) -> str | None:
        if self.budget.problem:
            return self.budget.problem
        seconds, tokens = self.result.seconds, self.result.trained_tokens
        if self.budget.seconds is not None and seconds > self.budget.seconds:
            return (f"the run reached the seal {seconds:.0f} s after it started; the track's budget with its "
                    f"startup allowance is {self.budget.seconds:.0f} s")
        cpu = self.result.cpu_seconds
        if self.budget.cpu_seconds is not None and (cpu is None or cpu > self.budget.cpu_seconds):
            return (f"the run's processes had used {cpu:.0f} CPU seconds when it reached the seal; the track's "
                    f"budget with its startup allowance is {self.budget.cpu_seconds:.0f} CPU seconds"
                    if cpu is not None else "the run's CPU time could not be read on this machine (Linux /proc)")
        if self.budget.tokens is not None and tokens is not None and tokens > self.budget.tokens:
            return (f"the run drew {tokens:,} training tokens through make_dataloader; the track's step budget at "
                    f"the batch train.py declares (TOTAL_BATCH_SIZE) allows {self.budget.tokens:,}")
        return None

    def _over_flops(self) -> str | None:
        """On a FLOPs-budgeted track, why the sealed weights and the tokens reported went past the budget."""
        if self.budget.flops is None:
            return None
        tokens = self.result.trained_tokens
        if tokens is None:
            return "the seal request did not say how many training tokens make_dataloader handed out"
        try:
            per_token = sealed_flops_per_token(self.destination, self.seq_len)
        except Exception as err:  # whatever the run's file makes the loader do, the answer is a refusal
            return (f"the sealed weights could not be counted: {type(err).__name__}: "
                    f"{' '.join(str(err).split())[:200]}")
        self.result.flops = per_token * tokens
        if self.result.flops > self.budget.flops:
            return (f"the run trained {self.result.flops:.3g} FLOPs ({tokens:,} tokens x {per_token:,} FLOPs per "
                    f"token of its sealed weights); the track's budget is {self.budget.flops:.3g}")
        return None

    def _refuse(self, why: str) -> str:
        """A refusal in the harness's own words; after the weights are sealed nothing the run asks can change its
        record (its requests then may carry what it read of val)."""
        if self.result.checkpoint is None:
            self.result.problem = self.result.problem or why
        return f"refused {why}"


def sealed_flops_per_token(checkpoint: Path, seq_len: int) -> int:
    """prepare.training_flops_per_token of sealed weights: every tensor's elements (read lazily: the file may
    be large), the config's layers and width, the track's sequence length. Only the form torch itself saves
    is counted: a flat state_dict of floating-point tensors and a config of plain values; anything else
    (weights packed into another dtype, nested, or carried in the config) is a ValueError."""
    import torch

    from trainer.prepare import training_flops_per_token
    state = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)
    if not isinstance(state, dict) or not isinstance(state.get("state_dict"), dict):
        raise ValueError("the checkpoint must hold a state_dict mapping names to tensors")
    weights, config = state["state_dict"], state.get("config")
    for name, tensor in weights.items():
        if not isinstance(tensor, torch.Tensor) or str(tensor.dtype) not in COUNTED_DTYPES:
            kind = tensor.dtype if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"state_dict[{str(name)[:60]!r}] is {kind}: only tensors of "
                             f"{', '.join(COUNTED_DTYPES)} are counted")
    if not isinstance(config, dict) or not all(
            isinstance(value, (int, float, str, bool, type(None))) for value in config.values()):
        raise ValueError("its config must be a dict of plain values (GPTConfig's fields)")
    n_layer, n_embd = config.get("n_layer"), config.get("n_embd")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (n_layer, n_embd)):
        raise ValueError("its config needs whole n_layer and n_embd of at least 1 (GPTConfig's)")
    params = sum(tensor.numel() for tensor in weights.values())
    return training_flops_per_token(params, n_layer, n_embd, seq_len)


def process_tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of root and every process below it (all threads, and the children they
    reaped), as the kernel charged them (Linux /proc; elsewhere, macOS, `ps`: without what reaped children
    used)."""
    parents, charged = _processes_from_proc() if Path("/proc/self/stat").exists() else _processes_from_ps()
    below = [root]
    for parent in below:  # grows while it is walked
        below += [pid for pid, ppid in parents.items() if ppid == parent and pid not in below]
    return sum(charged.get(pid, 0.0) for pid in below)


def _processes_from_proc() -> tuple[dict[int, int], dict[int, float]]:
    """(pid -> parent, pid -> CPU seconds with its reaped children's) of every process, from /proc."""
    parents, charged = {}, {}
    tick = os.sysconf("SC_CLK_TCK")
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_path.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # exited meanwhile
        pid = int(stat_path.parent.name)
        parents[pid] = int(fields[1])
        charged[pid] = sum(int(v) for v in fields[11:15]) / tick  # utime, stime, cutime, cstime (clock ticks)
    return parents, charged


def _processes_from_ps() -> tuple[dict[int, int], dict[int, float]]:
    """The same from `ps` (its `time`: [days-][hours:]minutes:seconds[.fraction], on Linux and macOS)."""
    import subprocess
    listed = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid=", "-o", "time="], capture_output=True,
                            text=True, timeout=30).stdout
    parents, charged = {}, {}
    for line in listed.splitlines():
        pid, ppid, used = line.split()
        days, _, clock = used.rpartition("-")
        seconds = 0.0
        for part in clock.split(":"):
            seconds = 60 * seconds + float(part)
        parents[int(pid)], charged[int(pid)] = int(ppid), seconds + 86400 * int(days or 0)
    return parents, charged
