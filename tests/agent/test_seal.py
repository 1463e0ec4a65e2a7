"""The validation seal with a real training-side process: val opens only after the weights are handed
over, once, and the number evaluate_bpb computes from the opened copy is the metric's number."""

import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from agent.workspace import TRACKED
from trainer import prepare
from trainer.prepare import TRACKS
from trainer.runs.training_run import CHECKPOINT
from trainer.runs.triage import Triage, classify
from trainer.sandbox.seal import (
    MAX_REQUEST_BYTES,
    OVER_BUDGET,
    RunBudget,
    Seal,
    _processes_from_proc,
    _processes_from_ps,
    data_paths,
    hidden_paths,
    process_tree_cpu_seconds,
    training_view,
)
from trainer.sandbox.untrusted import View, isolation_available, private_directory, run_untrusted
from trainer.tracks.spec import TrackConstants

# A model that evaluate_bpb can score: the same logits at every position (zeros: the uniform distribution).
RUN = textwrap.dedent('''
    import sys
    import torch
    from prepare import PrepareError, Tokenizer, evaluate_bpb, split_files

    class Unigram(torch.nn.Module):
        def __init__(self, vocab):
            super().__init__()
            self.logits = torch.nn.Parameter(torch.zeros(vocab))

        def forward(self, inputs, targets, reduction="none"):
            logits = self.logits.expand(targets.numel(), -1)
            return torch.nn.functional.cross_entropy(logits, targets.reshape(-1), reduction=reduction)

    for split in ("val", "holdout"):
        try:
            split_files(split)
        except PrepareError as err:
            print("CLOSED", split, err)
    tokenizer = Tokenizer.from_directory()
    model = Unigram(tokenizer.get_vocab_size())
    print("BPB", repr(evaluate_bpb(model, tokenizer, 8)))
    try:
        evaluate_bpb(model, tokenizer, 8)
    except PrepareError as err:
        print("AGAIN", err)
    for path in sys.argv[1:]:  # the real cache, which an isolated run must not read or change
        try:
            print("SAW", path, sorted(p.name for p in __import__("pathlib").Path(path).iterdir()))
            open(path + "/written", "w").close()
            print("WROTE", path)
        except OSError as err:
            print("DENIED", path, type(err).__name__)
''')


def run_sealed(workspace, test_track, tmp_path, isolate, *argv):
    run_dir = private_directory(tmp_path / "run")
    for name in TRACKED:
        (run_dir / name).write_text(workspace.file_at(name))
    (run_dir / "probe.py").write_text(RUN)
    cache = test_track.directory.parent
    seal = Seal(run_dir, test_track.directory, test_track.track.constants, CHECKPOINT, tmp_path / "sealed" / "0001.pt")
    env = {"AUTORESEARCH_CACHE": str(training_view(test_track.directory, run_dir)),
           "AUTORESEARCH_CHECKPOINT": CHECKPOINT, **seal.env()}
    try:
        outcome = run_untrusted([sys.executable, "probe.py", *argv], run_dir, tmp_path / "run.log", 120, env,
                                view=View(read_only=data_paths(cache), hidden=hidden_paths(cache)) if isolate else None,
                                pass_fds=(seal.child_fd,), on_start=lambda _: seal.started())
    finally:
        sealed = seal.finish()
    log = (tmp_path / "run.log").read_text()
    assert outcome.returncode == 0, log
    return sealed, log, run_dir


def test_val_opens_once_after_the_weights_are_sealed(workspace, test_track, tmp_path):
    sealed, log, run_dir = run_sealed(workspace, test_track, tmp_path, False)

    assert log.count(prepare.SEALED) >= 3, log  # val and holdout closed before the seal, a second seal refused
    assert "CLOSED val" in log and "CLOSED holdout" in log and "AGAIN" in log
    assert sorted(p.name for p in (run_dir / "data" / "test").iterdir()) == ["tokenizer", "track.json", "train"]
    assert sealed.problem is None and sealed.checkpoint == tmp_path / "sealed" / "0001.pt"
    assert sealed.sha256 == hashlib.sha256(sealed.checkpoint.read_bytes()).hexdigest()
    assert sorted(p.name for p in (run_dir / "opened" / "test").iterdir()) == ["track.json", "val"]

    # The number from the opened copy is the metric on the cache's own val split.
    import torch
    vocab = prepare.Tokenizer.from_directory(test_track.directory).get_vocab_size()
    uniform = torch.nn.Module()
    uniform.logits = torch.nn.Parameter(torch.zeros(vocab))
    uniform.forward = lambda inputs, targets, reduction="none": torch.nn.functional.cross_entropy(
        uniform.logits.expand(targets.numel(), -1), targets.reshape(-1), reduction=reduction)
    expected = prepare.evaluate_bpb(uniform, prepare.Tokenizer.from_directory(test_track.directory), 8,
                                    data_dir=test_track.directory)
    printed = float(next(line for line in log.splitlines() if line.startswith("BPB")).split()[1])
    assert printed == pytest.approx(expected, rel=1e-12)


@pytest.mark.skipif(not isolation_available(), reason="needs bubblewrap that can make namespaces")
def test_an_isolated_run_cannot_find_the_sealed_splits_in_the_real_cache(workspace, test_track, tmp_path):
    val, train = test_track.directory / "val", test_track.directory / "train"
    _, log, _ = run_sealed(workspace, test_track, tmp_path, True, str(val), str(train))

    assert f"SAW {val} []" in log  # an empty mount over the real val directory
    assert f"DENIED {train} OSError" in log and "WROTE" not in log  # the data is read-only
    assert "BPB" in log and not (train / "written").exists()


def seal_client(tmp_path, budget, pid=None):
    """A Seal for an empty run directory, and the run's end of its socket, held as a run would hold it
    (pid: the process whose tree the seal charges CPU seconds to)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True)
    seal = Seal(run_dir, tmp_path / "track", TrackConstants.of_track("test"), CHECKPOINT, tmp_path / "sealed.pt",
                budget=budget)
    client = socket.socket(fileno=os.dup(seal.child_fd))
    seal.started(pid)
    return seal, client


def ask(client, request: bytes) -> bytes:
    client.sendall(request)
    with client.makefile("rb") as answers:
        return answers.readline()


def test_the_seal_refuses_a_run_past_its_budget_and_says_so_in_the_record(tmp_path):
    seal, client = seal_client(tmp_path, RunBudget(seconds=0.05))
    time.sleep(0.1)
    answer = ask(client, b"seal val trained_tokens=5\n")
    client.close()
    sealed = seal.finish()
    assert answer.startswith(b"refused " + OVER_BUDGET.encode()) and sealed.checkpoint is None
    assert sealed.seconds >= 0.1 and sealed.trained_tokens == 5
    verdict = classify(1, False, "PrepareError: the harness did not open the val split", [], sealed.problem)
    assert verdict.triage == Triage.OVER_BUDGET and "reached the seal" in verdict.reason

    seal, client = seal_client(tmp_path / "tokens", RunBudget(tokens=2048))
    assert ask(client, b"seal val trained_tokens=2049\n").startswith(b"refused over budget")
    assert ask(client, b"seal val trained_tokens=1\n").startswith(b"refused the run already sealed")  # no retry
    client.close()
    assert "drew 2,049 training tokens" in seal.finish().problem


def test_the_seal_reads_requests_with_a_length_limit(tmp_path):
    seal, client = seal_client(tmp_path, RunBudget())
    with pytest.raises(OSError):  # no newline: a reader without a limit would hold it all; this one hangs up
        for _ in range(4096):
            client.sendall(b"x" * MAX_REQUEST_BYTES)
    sealed = seal.finish()
    client.close()
    assert f"more than {MAX_REQUEST_BYTES} bytes" in sealed.problem and sealed.checkpoint is None


def test_the_step_budget_is_counted_at_the_batch_train_py_declares(workspace, test_track, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in TRACKED:
        (run_dir / name).write_text(workspace.file_at(name))
    assert RunBudget.of_run(test_track.track.constants, run_dir) == RunBudget(tokens=(30 + 1) * 2**11)
    (run_dir / "train.py").write_text((run_dir / "train.py").read_text().replace(
        "TOTAL_BATCH_SIZE = 2048", "TOTAL_BATCH_SIZE = 2**12"))
    assert RunBudget.of_run(test_track.track.constants, run_dir) == RunBudget(tokens=(30 + 1) * 2**12)


SPIN_IN_A_GRANDCHILD = """
import subprocess, sys
spinner = subprocess.Popen([sys.executable, "-c", '''
import sys, time
start = time.process_time()
while time.process_time() - start < 1.0:
    pass
print("spun", flush=True)
sys.stdin.read()
'''], stdin=subprocess.PIPE, stdout=sys.stdout)
spinner.wait()
"""


def test_a_cpu_clock_budget_counts_the_cpu_seconds_of_the_run_and_everything_below_it(tmp_path):
    cpu_clock = TrackConstants.model_validate({**TRACKS["cpu"], "flops_budget": None, "budget_clock": "cpu"})
    assert RunBudget.of_run(cpu_clock, tmp_path) == RunBudget(cpu_seconds=120.0)  # 60 + the 60 s startup allowance

    run = subprocess.Popen([sys.executable, "-c", SPIN_IN_A_GRANDCHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout.readline() == "spun\n"
        assert 0.9 <= process_tree_cpu_seconds(run.pid) < 5  # the grandchild's second, not this process's
        from_proc, from_ps = _processes_from_proc(), _processes_from_ps()  # ps: where there is no /proc (macOS)
        grandchild = next(pid for pid, parent in from_ps[0].items() if parent == run.pid)
        assert from_ps[0][grandchild] == from_proc[0][grandchild] == run.pid
        assert abs(from_ps[1][grandchild] - from_proc[1][grandchild]) < 1.0  # procps shows whole seconds
        assert from_ps[1][grandchild] >= 0.9
    finally:
        run.kill()
        run.wait()

    # Charged to this test process, which has used more than 0.01 CPU seconds by now.
    seal, client = seal_client(tmp_path / "over", RunBudget(cpu_seconds=0.01), pid=os.getpid())
    assert ask(client, b"seal val trained_tokens=1\n").startswith(b"refused over budget: the run's processes had")
    client.close()
    sealed = seal.finish()
    assert sealed.cpu_seconds > 0.01 and "CPU seconds" in sealed.problem

    seal, client = seal_client(tmp_path / "within", RunBudget(cpu_seconds=1e9), pid=os.getpid())
    assert ask(client, b"seal val trained_tokens=1\n").startswith(b"refused no weights were saved")
    client.close()
    seal.finish()


@pytest.mark.parametrize("rebinding", [
    "TOTAL_BATCH_SIZE: int = 2048\n",                                     # annotated: the first form missed it
    "def main():\n    global TOTAL_BATCH_SIZE\n    TOTAL_BATCH_SIZE = 2048\n",
    "TOTAL_BATCH_SIZE //= 2**13\n",
    "for TOTAL_BATCH_SIZE in (2048,):\n    pass\n",
])
def test_a_batch_declared_twice_leaves_a_step_budget_unknown_and_every_seal_refused(tmp_path, rebinding):
    steps = TrackConstants.of_track("test")  # 30 steps
    (tmp_path / "train.py").write_text("TOTAL_BATCH_SIZE = 2**24\n")
    assert RunBudget.of_run(steps, tmp_path) == RunBudget(tokens=31 * 2**24)
    (tmp_path / "train.py").write_text("TOTAL_BATCH_SIZE = 2**24\n" + rebinding)
    budget = RunBudget.of_run(steps, tmp_path)
    assert budget.tokens is None and "assign once, at the top level" in budget.problem
    seal, client = seal_client(tmp_path / "seal", budget)
    assert ask(client, b"seal val trained_tokens=1\n").startswith(b"refused over budget: the step budget counts")
    client.close()
    seal.finish()


def flops_checkpoint(tmp_path, state) -> tuple:
    """A track directory of a FLOPs-budgeted track and a seal whose run saved `state` as its weights."""
    import torch
    track = tmp_path / "track"
    track.mkdir(parents=True)
    (track / "track.json").write_text(json.dumps({"constants": {"max_seq_len": 128, "flops_budget": 1e12}}))
    (track / "val").mkdir()  # what the seal opens for a run it accepts
    seal, client = seal_client(tmp_path, RunBudget(flops=1e12))
    torch.save(state, tmp_path / "run" / CHECKPOINT)
    return seal, client


CONFIG = {"n_layer": 2, "n_embd": 64, "sequence_len": 128, "window_pattern": "SSSL"}


def weights(**tensors):
    return {"state_dict": tensors, "config": CONFIG}


@pytest.mark.parametrize(("state", "why"), [
    ({"state_dict": [("w", "tensor")], "config": CONFIG}, "a state_dict mapping names to tensors"),
    (weights(w={"packed": "tensor"}), "state_dict['w'] is dict"),
    (weights(w="complex"), "state_dict['w'] is torch.complex128"),
    ({"state_dict": {"w": "tensor"}, "config": {**CONFIG, "carried": ["tensor"]}}, "config must be a dict of plain"),
    ({"state_dict": {"w": "tensor"}, "config": {**CONFIG, "n_layer": True}}, "whole n_layer and n_embd"),
    (["not", "a", "dict"], "a state_dict mapping names to tensors"),  # the count once raised: the run hung
])
def test_sealed_weights_in_any_form_but_torch_s_own_are_refused_not_counted(tmp_path, state, why):
    import torch
    made = {"tensor": torch.zeros(4096), "complex": torch.zeros(4096).view(torch.complex128)}

    def real(value):
        if isinstance(value, dict):
            return {k: real(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(real(v) for v in value)
        return made.get(value, value) if isinstance(value, str) else value
    seal, client = flops_checkpoint(tmp_path, real(state))
    answer = ask(client, b"seal val trained_tokens=2048\n").decode()
    client.close()
    sealed = seal.finish()
    assert answer.startswith("refused over budget: the sealed weights could not be counted") and why in answer
    assert sealed.checkpoint is None and not (tmp_path / "sealed.pt").exists()


def test_weights_in_torch_s_form_are_counted_every_tensor_and_held_to_the_budget(tmp_path):
    import torch
    state = weights(w=torch.zeros(64, 64), e=torch.zeros(1024, 64, dtype=torch.bfloat16))
    per_token = prepare.training_flops_per_token(64 * 64 + 1024 * 64, 2, 64, 128)
    seal, client = flops_checkpoint(tmp_path / "within", state)
    within = int(1e12 // per_token)
    assert ask(client, f"seal val trained_tokens={within}\n".encode()).startswith(b"open ")
    client.close()
    assert seal.finish().flops == per_token * within <= 1e12
    seal, client = flops_checkpoint(tmp_path / "past", state)
    assert ask(client, f"seal val trained_tokens={within + 1}\n".encode()).startswith(b"refused over budget: the run "
                                                                                        b"trained")
    client.close()
    assert seal.finish().checkpoint is None


def test_after_its_seal_nothing_the_run_asks_changes_its_record_or_is_repeated(tmp_path):
    """A run's forward sees val after the seal and can still write to the seal's socket: what it writes there is
    refused in the harness's words, never quoted back or kept as the run's problem (a reason the proposer reads)."""
    track = tmp_path / "track"
    (track / "val").mkdir(parents=True)
    (track / "track.json").write_text("{}")
    seal, client = seal_client(tmp_path, RunBudget())
    (tmp_path / "run" / CHECKPOINT).write_bytes(b"weights")
    assert ask(client, b"seal val trained_tokens=1\n").startswith(b"open ")
    answer = ask(client, b"VALROW 0c1f3a\n")
    assert answer.startswith(b"refused a request other than `seal val`") and b"VALROW" not in answer
    client.sendall(b"VALROW again")
    client.close()  # mid-request: the seal's reader ends quietly
    sealed = seal.finish()
    assert sealed.problem is None and sealed.checkpoint is not None
