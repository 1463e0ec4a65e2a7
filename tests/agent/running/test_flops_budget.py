"""A FLOPs-budgeted track: the harness counts the sealed weights' parameters and the tokens handed out, whatever
train.py says about its own budget; the record names the machine that ran it."""

import os
from pathlib import Path

import pytest

from agent.running.jobs import Job
from agent.running.runner import LocalRunner
from agent.workspace import Workspace
from trainer.hardware import this_machine
from trainer.prepare import training_flops_per_token
from trainer.run_id import RunId
from trainer.triage import Triage

BUDGET_LINE = ("    STEP_BUDGET = budget_steps(num_params, config.n_layer, config.n_embd, TOTAL_BATCH_SIZE, "
               "rows * MAX_SEQ_LEN)\n")


@pytest.fixture(scope="module")
def flops_workspace(test_track, tmp_path_factory):
    from trainer.track_builder import prepare_track
    prepared = prepare_track("test-flops", cache=Path(os.environ["AUTORESEARCH_CACHE"]), show_progress=False)
    return Workspace.create("flops", prepared.spec, Path(os.devnull), tmp_path_factory.mktemp("workspaces"))


def run(workspace: Workspace, source: str | None, name: str):
    commit = workspace.commit_train(source, name) if source else workspace.head()
    return LocalRunner().run(workspace, Job(run=RunId.train(name), commit=commit, seed=42, timeout=300))


def test_a_run_within_its_flops_trains_what_they_buy_and_one_past_them_is_over_budget(flops_workspace):
    budget = flops_workspace.track["constants"]["flops_budget"]
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
