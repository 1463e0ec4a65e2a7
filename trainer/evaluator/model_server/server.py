"""Serves a trained model to trainer/evaluator/evaluate.py, one batch of rows at a time, each in a fresh process.

    python -m trainer.evaluator.model_server.server CHECKPOINT --device cpu|cuda [--sandboxed]

Protocol on stdin/stdout: a JSON line ``{"op": "losses" | "picked", "rows": r, "cols": c}``
followed by r x c little-endian int32 values; the answer is a JSON line ``{"shape": [...]}`` followed by
that many little-endian float32 values. ``losses``: the cross-entropy of ``rows[:, 1:]`` given
``rows[:, :-1]`` per token; ``picked``: the logits of the last ``losses`` batch at the positions given per
row (r x c of them).

The model is train.py's code (``GPTConfig(**config)``, ``build_model(config, device)``, ``model(inputs)``
returns logits), so it is untrusted, and it must not learn from the text it is shown: nothing of one
batch may reach the next. This process is a trusted zygote (trainer/evaluator/model_server/zygote.py) that never imports
train.py. It loads the checkpoint on the CPU (it never starts CUDA, which a fork cannot inherit), makes
itself not dumpable (no process of its user can read or write its memory) and, for every ``losses``
request, forks a fresh model process (trainer/evaluator/model_server/model_process.py), which alone imports
train.py, builds the model from the checkpoint tensors it shares copy-on-write, answers that request
and the ``picked`` one that follows through pipes of its own, and is killed. It never holds the real
stdin, stdout or log: its stdout and stderr are a third pipe, which the zygote copies to the log. Rows,
answers and output move between the pipes in the kernel (splice): they never pass through the zygote's
memory, which later forks inherit, and an answer is relayed only after its header proves to be the one
the request calls for.

Before the next fork the zygote makes sure nothing of a batch is left (`Zygote.clear`, with the checks
of batch_leftovers.py): no process but itself and its ancestors (with ``--sandboxed``, in bwrap's pid
namespace from isolated_command in trainer/sandbox/view.py, all of it; without, its descendants, which
cannot leave it as it is their subreaper) and, sandboxed only, as otherwise they are the machine's, no
SysV IPC object, no key in its uid's keyrings and nothing new in any place a model process could write
(`Scratch`: on CUDA /tmp and /dev/shm; on CPU the evaluator makes those read-only). Nor may its limits,
priority, scheduling or CPU affinity have changed (another process of its uid may change them, and a
fork inherits them). A model process also gets, where the kernel lets it, network and IPC namespaces of
its own that die with it, and no POSIX message queue (a zero limit). Whatever fails here fails the
server: the evaluator reports a failed model server.

Left open, as between any processes that share a kernel: side channels of a few bits a batch (the
zygote's CPU time and context switches in /proc/<pid>/stat, which a model process can modulate) and the
page cache of the files it can read (which pages are cached); the TCP state of the sandbox's network
namespace where a model process cannot have one of its own; and, where bwrap runs without root, the
memory of bwrap's own pid 1 (the server warns).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import sys
from pathlib import Path

from trainer.evaluator.model_server.protocol import Refused, say
from trainer.evaluator.model_server.zygote import Zygote

CUDA_ERROR_NOT_INITIALIZED = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--sandboxed", action="store_true",
                        help="in bwrap's pid namespace, with /tmp and /dev/shm of its own: it may clear them")
    args = parser.parse_args(argv)
    sys.stdout = sys.stderr  # a stray print goes to the log; answers go to fd 1 only through the relay
    if args.sandboxed and not own_pid_namespace():
        say("--sandboxed, but this pid namespace is not bwrap's: refusing to kill every process in sight")
        return 2
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # torch.cuda.is_available() without cuInit

    import numpy  # noqa: F401  (imported once here, for every model process)
    import torch
    warm_torch()

    state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    if not state.get("config"):
        say(f"{args.checkpoint} has no model config: the model must keep its dataclass `config`")
        return 2
    if torch.cuda.is_initialized() or cuda_driver_started():
        say("CUDA was started before the first fork: the model processes could not use it")
        return 2
    zygote = None
    try:
        zygote = Zygote(state, args.device, args.sandboxed)
        zygote.serve()
    except Refused as err:
        say(f"model server: {err}")
        return 1
    finally:
        if zygote is not None:
            zygote.close()
    return 0


def warm_torch() -> None:
    """Imports what building a model imports (torch._dynamo, ~1 s) here, once rather than in every model process.
    That import makes torch's compile cache directory: where /tmp is read-only (a CPU server, which compiles
    nothing) the nearest directory that exists stands for it."""
    if cache := os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        try:
            os.makedirs(cache, exist_ok=True)
        except OSError:
            path = Path(cache).absolute()
            while not path.is_dir():
                path = path.parent
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    import torch._dynamo  # noqa: F401


def cuda_driver_started() -> bool:
    """Whether this process has called cuInit (the driver answers anything else before it with NOT_INITIALIZED)."""
    with contextlib.suppress(OSError):
        driver, count = ctypes.CDLL("libcuda.so.1"), ctypes.c_int(0)
        return driver.cuDeviceGetCount(ctypes.byref(count)) != CUDA_ERROR_NOT_INITIALIZED
    return False


def own_pid_namespace() -> bool:
    """Whether pid 1 here is bwrap (as its --unshare-pid makes it) and this process its child."""
    with contextlib.suppress(OSError):
        return os.path.basename(Path("/proc/1/cmdline").read_bytes().split(b"\0")[0]) == b"bwrap" and os.getppid() == 1
    return False


if __name__ == "__main__":
    sys.exit(main())
