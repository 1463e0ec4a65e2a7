"""A FLOPs-budgeted track: the harness counts the sealed weights' parameters and the tokens handed out, whatever
train.py says about its own budget; the record names the machine that ran it."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agent.running.runner import LocalRunner
from agent.workspace import Workspace
from trainer.prepare import TRACKS, training_flops_per_token
from trainer.runs.jobs import Job
from trainer.runs.run_id import RunId
from trainer.runs.training_run import CHECKPOINT
from trainer.runs.triage import Triage, classify
from trainer.sandbox.seal import RunBudget, Seal, Sealed
from trainer.tracks.hardware import this_machine
from trainer.tracks.hyperparameters import train_source_for_track
from trainer.tracks.spec import TrackConstants

BUDGET_LINE = ("    STEP_BUDGET = budget_steps(num_params, config.n_layer, config.n_embd, TOTAL_BATCH_SIZE, "
               "rows * MAX_SEQ_LEN)\n")


@pytest.fixture(scope="module")
def flops_workspace(test_track, tmp_path_factory):
    from trainer.tracks.builder import prepare_track
    prepared = prepare_track("test-flops", cache=Path(os.environ["AUTORESEARCH_CACHE"]), show_progress=False)
    return Workspace.create("flops", prepared.spec, Path(os.devnull), tmp_path_factory.mktemp("workspaces"))


def run(workspace: Workspace, source: str | None, name: str):
    commit = workspace.commit_train(source, name) if source else workspace.head()
    return LocalRunner().run(workspace, Job(run=RunId.train(name), commit=commit, seed=42, timeout=300))


def test_a_run_within_its_flops_trains_what_they_buy_and_one_past_them_is_over_budget(flops_workspace):
    budget = flops_workspace.track.constants.flops_budget
    baseline = run(flops_workspace, None, "0001")
    assert baseline.verdict.triage == Triage.OK, baseline.tail
    per_token = training_flops_per_token(294_980, 2, 64, 128)  # the test model: every parameter counted
    steps = int((budget // per_token - 2**11) // 2**11)  # the micro-batch drawn after the last step is counted too
    assert int(baseline.summary["num_steps"]) == steps == 28
    assert baseline.flops == per_token * baseline.trained_tokens == per_token * 29 * 2**11 <= budget
    assert baseline.hardware == this_machine()

    source = flops_workspace.file_at("train.py")
    assert source.count(BUDGET_LINE) == 1
    greedy = source.replace(BUDGET_LINE, BUDGET_LINE.replace("(num_params,", "(num_params // 3,"))
    over = run(flops_workspace, greedy, "0002")
    assert over.verdict.triage == Triage.OVER_BUDGET, over.tail
    assert "FLOPs per token of its sealed weights" in over.verdict.reason and over.checkpoint is None


# In a directory holding the cpu track's train.py and prepare.py: the baseline model's weights saved as evaluate_bpb
# saves them, and the steps budget_steps gives it (train.main's call).
SAVE_CPU_BASELINE = """
import prepare, train
config = train.config_from_hyperparameters(prepare.VOCAB_SIZE)
model = train.build_model(config)
prepare.save_checkpoint(model)
rows = min(train.DEVICE_BATCH_SIZE, train.TOTAL_BATCH_SIZE // prepare.MAX_SEQ_LEN)
num_params = sum(p.numel() for p in model.parameters())
print(num_params, prepare.budget_steps(num_params, config.n_layer, config.n_embd, train.TOTAL_BATCH_SIZE,
                                       rows * prepare.MAX_SEQ_LEN), train.TOTAL_BATCH_SIZE)
"""


def cpu_baseline_checkpoint(directory: Path) -> tuple[Path, int, int, int]:
    """(the cpu baseline's saved weights, its parameters, the steps its budget buys, its batch in tokens)."""
    directory.mkdir()
    trainer = Path(__file__).resolve().parents[3] / "trainer"
    (directory / "train.py").write_text(train_source_for_track((trainer / "train.py").read_text(), "cpu"))
    shutil.copy2(trainer / "prepare.py", directory / "prepare.py")
    env = {**os.environ, "AUTORESEARCH_TRACK": "cpu", "AUTORESEARCH_CHECKPOINT": "weights.pt"}
    done = subprocess.run([sys.executable, "-c", SAVE_CPU_BASELINE], cwd=directory, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    params, steps, batch = map(int, done.stdout.split())
    return directory / "weights.pt", params, steps, batch


def sealed_at(tmp_path: Path, weights: Path, tokens: int) -> tuple[str, Sealed]:
    """The seal's answer to a cpu-track run that saved these weights and drew these training tokens."""
    track, run_dir = tmp_path / "cpu", tmp_path / "run"
    (track / "val").mkdir(parents=True)  # what the seal opens for a run it accepts
    (track / "track.json").write_text(json.dumps({"constants": TRACKS["cpu"]}))
    run_dir.mkdir()
    shutil.copy2(weights, run_dir / CHECKPOINT)
    seal = Seal(run_dir, track, TrackConstants.of_track("cpu"), CHECKPOINT, tmp_path / "sealed.pt")
    assert seal.budget == RunBudget(flops=TRACKS["cpu"]["flops_budget"])  # not seconds of any clock
    client = socket.socket(fileno=os.dup(seal.child_fd))
    seal.started()
    client.sendall(f"seal val trained_tokens={tokens}\n".encode())
    with client.makefile("rb") as answers:
        answer = answers.readline().decode()
    client.close()
    return answer, seal.finish()


def test_the_cpu_track_s_seal_counts_the_baseline_s_flops_and_refuses_a_step_past_them(tmp_path):
    """What the cpu baseline trained in 60 CPU seconds of an idle machine (79 steps, 11 of them warm-up), now
    counted by the harness whatever the load: its weights' FLOPs per token times the tokens it drew."""
    weights, params, steps, batch = cpu_baseline_checkpoint(tmp_path / "baseline")
    per_token = training_flops_per_token(params, 4, 128, 256)  # depth 4, width 128, rows of 256 tokens
    assert (params, per_token, batch) == (2_883_720, 18_875_184, 2**12)
    assert steps == 79
    drawn = (steps + 1) * batch  # the micro-batch drawn after the last step is counted too

    answer, sealed = sealed_at(tmp_path / "within", weights, drawn)
    assert answer.startswith("open ") and sealed.checkpoint is not None
    assert sealed.flops == per_token * drawn <= TRACKS["cpu"]["flops_budget"]

    answer, sealed = sealed_at(tmp_path / "past", weights, drawn + batch)
    assert answer.startswith("refused over budget: the run trained") and sealed.checkpoint is None
    assert "FLOPs per token of its sealed weights" in sealed.problem
    assert classify(1, False, "", [], sealed.problem).triage == Triage.OVER_BUDGET
