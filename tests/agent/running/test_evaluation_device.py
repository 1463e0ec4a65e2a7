"""The trusted evaluator takes a device the way runs do: on LocalRunner it holds a slot, so it sees that slot's GPU
(CUDA_VISIBLE_DEVICES) and never one a budgeted run trains on, and waits while every slot trains. The device map is
the test's (GPUs 3 and 5 of a machine without CUDA: the variable is only a name there); the runs are real ones in
the sandbox, the evaluator the real trainer/evaluator/evaluate.py, which says in its log where its model server runs."""

import re
import threading
import time

import pytest

from agent.running.evaluator import EvaluationFailed
from agent.running.runner import LocalRunner
from trainer.runs.jobs import EvaluationJob, Job
from trainer.runs.run_id import RunId, RunKind

SLEEPS = "import time\ntime.sleep({seconds})\n"  # a run that holds its slot and trains nothing


def evaluation_device(runner, workspace, commit: str, name: str) -> tuple[str, float]:
    """(the CUDA_VISIBLE_DEVICES the evaluator saw, time.monotonic() as it ended) for weights that do not load."""
    run = RunId.noise(name, 0).then(RunKind.VERIFY)
    job = EvaluationJob(run=run, commit=commit, checkpoint=workspace.dir / "checkpoints" / f"{name}.pt", timeout=120)
    with pytest.raises(EvaluationFailed):
        runner.evaluate(workspace, job)
    ended = time.monotonic()
    log = workspace.paths(run).log.read_text()
    said = re.search(r"evaluator: the model server runs on cpu \(CUDA_VISIBLE_DEVICES=(\d+)\)", log)
    assert said, log
    return said.group(1), ended


def test_an_evaluation_takes_a_free_slots_gpu_and_waits_while_every_slot_trains(workspace):
    runner = LocalRunner(gpus=[3, 5])
    sleeper = workspace.commit_train(SLEEPS.format(seconds=12), "sleeps")
    ended: dict[str, float] = {}
    gpus: dict[str, str] = {}

    def train(name: str) -> None:
        result = runner.run(workspace, Job(run=RunId.noise(name, 0), commit=sleeper, seed=1, timeout=60))
        ended[name], gpus[name] = time.monotonic(), result.where.rsplit("GPU ", 1)[1]

    first = threading.Thread(target=train, args=("0001",))
    first.start()
    time.sleep(3)  # the run holds slot 1, GPU 3
    gpu, evaluated = evaluation_device(runner, workspace, sleeper, "0002")
    assert "0001" not in ended and gpu == "5"  # beside the run, on the other GPU, while it trained

    second = threading.Thread(target=train, args=("0003",))
    second.start()
    first.join()
    third = threading.Thread(target=train, args=("0004",))  # both slots train again
    third.start()
    time.sleep(3)
    gpu, evaluated = evaluation_device(runner, workspace, sleeper, "0005")
    second.join()
    third.join()
    assert gpus["0001"] == "3" and sorted(gpus["0003"] + gpus["0004"]) == ["3", "5"]
    freed_first = min(("0003", "0004"), key=ended.get)
    assert evaluated >= ended[freed_first]  # it waited for a slot to free
    assert gpu == gpus[freed_first]  # and took that slot's GPU, never the one still training
