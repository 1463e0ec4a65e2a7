"""A model process of the model server: forked from the zygote (zygote.py), it alone imports train.py,
answers one batch and dies."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from contextlib import nullcontext
from pathlib import Path

from trainer.evaluator.model_server.batch_leftovers import (
    KEYCTL_JOIN_SESSION_KEYRING,
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    keyctl,
    libc,
    prctl,
)
from trainer.evaluator.model_server.protocol import answer_header, read_request, write_all

CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWNET = 0x08000000, 0x10000000, 0x40000000


def become_model_process(requests: int, answers: int, output: int, first: bool) -> None:
    """In the fork, before train.py: stdin /dev/null, stdout and stderr the output pipe, no other descriptor
    of the zygote's, a session keyring of its own, and its own network and IPC namespaces where the kernel
    allows them."""
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
        if fd > 2 and fd not in (requests, answers):
            with contextlib.suppress(OSError):
                os.close(fd)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    keyctl(KEYCTL_JOIN_SESSION_KEYRING, 0)
    if (why := private_namespaces()) and first:
        print(f"[model server] no network and IPC namespaces of its own for a model process ({why}): SysV IPC "
              "is cleared between batches where the server is sandboxed, the network namespace's TCP state is not",
              flush=True)


def private_namespaces() -> str | None:
    """A user namespace (mapping this uid and gid to themselves) with network and IPC namespaces of its own,
    which die with this process and its children; None, or why not."""
    uid, gid = os.geteuid(), os.getegid()
    prctl(PR_SET_DUMPABLE, 1)  # the zygote's flag; while it is off /proc/self/*_map are not this process's own
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC) != 0:
        return f"unshare: {os.strerror(ctypes.get_errno())}"
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        try:
            Path(f"/proc/self/{name}").write_text(text)
        except OSError as err:
            return f"{name}: {err.strerror}"
    return None


def build(state: dict, device):
    """train.py's model from the checkpoint state, in eval mode (imports train.py from the working directory)."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)  # the exported commit's train.py
    import train
    model = train.build_model(train.GPTConfig(**state["config"]), device)
    model.load_state_dict(state["state_dict"])
    model.eval()
    return model


def serve_batch(state: dict, device_name: str, requests: int, answers: int) -> None:
    import numpy as np
    import torch

    device = torch.device(device_name)
    model = build(state, device)
    autocast = torch.amp.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()

    def answer(out) -> None:
        array = out.cpu().numpy().astype("<f4")
        write_all(answers, answer_header(list(array.shape)) + b"\n")
        write_all(answers, array.tobytes())

    logits = None
    while (request := read_request(requests)) is not None:
        op, rows, cols, payload = request
        values = torch.from_numpy(np.frombuffer(payload, dtype="<i4").reshape(rows, cols).astype(np.int64)).to(device)
        if op == "picked":
            answer(logits.gather(1, values.unsqueeze(-1).expand(-1, -1, logits.size(-1))))
            continue
        with torch.no_grad(), autocast:
            logits = model(values[:, :-1]).float()
        answer(torch.nn.functional.cross_entropy(logits.flatten(0, 1), values[:, 1:].flatten(),
                                                 reduction="none").view(rows, cols - 1))
