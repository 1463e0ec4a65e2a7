"""The run path on its own: a commit's files in, a typed RunResult out, with no workspace, repository or
agent involved; and the spool's messages, validated when read."""

import hashlib
import json
from pathlib import Path

import git
import pytest

from trainer.remote import spool as spoolfs
from trainer.remote.spool import SpoolJob, SpoolMessageError, SpoolResult
from trainer.remote.worker import Worker
from trainer.runs.jobs import Job
from trainer.runs.run_id import RunId
from trainer.runs.run_result import RunResult
from trainer.runs.training_run import FROZEN, RunRequest, run_commit
from trainer.runs.triage import Triage
from trainer.sandbox.untrusted import isolation_available

TRAINER = Path(__file__).resolve().parents[2] / "trainer"
PRINTS_A_RESULT = b"""
print("config: {'n_layer': 2, 'n_embd': 64}")
print("---")
print("val_bpb: 1.234567")
print("device: cpu")
"""


def commit_files(test_track, train_py: bytes, track_json: bytes | None = None) -> dict[str, bytes]:
    return {"train.py": train_py, "prepare.py": (TRAINER / "prepare.py").read_bytes(),
            "track.json": track_json if track_json is not None else json.dumps(test_track.spec).encode()}


def run(files: dict[str, bytes], place: dict, on_start=None, **options) -> RunResult:
    frozen = {name: hashlib.sha256(files[name]).hexdigest() for name in FROZEN}
    return run_commit(RunRequest(files=files, seed=7, timeout=60, frozen_sha256=frozen, **place, **options),
                      on_start=on_start)


def test_a_commit_runs_from_its_files_alone(test_track, place):
    seen = []
    train_py = PRINTS_A_RESULT + b"import os; print('seed', os.environ['AUTORESEARCH_SEED'])\n"
    result = run(commit_files(test_track, train_py), place, extra_env={"CUDA_VISIBLE_DEVICES": "3"},
                 on_start=seen.append)
    assert result.verdict.triage == Triage.OK and result.verdict.reason == "val_bpb 1.234567", result.tail
    assert result.summary == {"val_bpb": "1.234567", "device": "cpu"}
    assert result.model_config == {"n_layer": 2, "n_embd": 64}
    assert result.returncode == 0 and not result.timed_out and result.frozen_changed == []
    assert result.isolated == isolation_available() and len(seen) == 1
    assert result.checkpoint is None and result.log_path == place["log_path"]
    assert "seed 7" in place["log_path"].read_text()
    assert not place["run_dir"].exists()
    # What a worker sends back is what the agent reads, field for field.
    message = SpoolResult(id="t-0000-abc", worker="w1", run=result).model_dump_json()
    assert SpoolResult.model_validate_json(message).run == result


def test_a_track_json_that_is_not_one_is_infra_without_running(test_track, place):
    result = run(commit_files(test_track, b"open('ran', 'w')\n", b'{"track": "gpu"}'), place)
    assert result.verdict.triage == Triage.INFRA and result.returncode is None
    assert "the commit's track.json is not a track.json this version reads" in result.verdict.reason
    assert "fingerprint: Field required" in result.verdict.reason
    assert "[harness]" in place["log_path"].read_text() and not place["run_dir"].exists()
    with pytest.raises(ValueError, match="missing: track.json"):
        run_commit(RunRequest(files={"train.py": b"", "prepare.py": b""}, seed=1, timeout=5, frozen_sha256={},
                              **place))


def test_a_malformed_job_gets_an_infra_result_and_is_not_run(tmp_path):
    spool = spoolfs.layout(tmp_path / "spool")
    spoolfs.write_json_atomic(spool / "jobs" / "t-0001-abc.json", {"id": "t-0001-abc", "job": {
        "kind": "train", "run": {"experiment": "0001"}, "commit": "HEAD", "timeout": -1}})
    assert spoolfs.claim_next(spool, "w1") is None
    refused = spoolfs.read_message(spool / "results" / "t-0001-abc.json", SpoolResult)
    assert refused.run is None and refused.worker == "w1"
    assert "is not a SpoolJob" in refused.infra
    assert "workspace: Field required" in refused.infra
    assert "a spool job names a full commit hash and a timeout above 0, not 'HEAD' and -1.0" in refused.infra
    assert not list((spool / "claimed").iterdir()) and not list((spool / "jobs").iterdir())


def test_a_result_from_another_version_is_a_clear_error(tmp_path):
    spool = spoolfs.layout(tmp_path / "spool")
    old = spool / "results" / "t-0002-abc.json"
    spoolfs.write_json_atomic(old, {"id": "t-0002-abc", "worker": "w1", "returncode": 0, "timed_out": False})
    with pytest.raises(SpoolMessageError, match=r"t-0002-abc.json is not a SpoolResult \(returncode: Extra inputs"):
        spoolfs.read_message(old, SpoolResult)
    old.write_text("{not json")
    with pytest.raises(SpoolMessageError, match=r"is not a SpoolResult \(the file: Invalid JSON"):
        spoolfs.read_message(old, SpoolResult)
    assert spoolfs.read_message(spool / "results" / "none.json", SpoolResult) is None
    job = SpoolJob(id="t-0003-abc", workspace=tmp_path, frozen={},
                   job=Job(run=RunId.train("0003"), commit="a" * 40, timeout=10))
    spoolfs.submit(spool, job)
    claimed = spoolfs.claim_next(spool, "w2")
    assert claimed == job.model_copy(update={"worker": "w2"})
    assert spoolfs.read_message(spool / "claimed" / "t-0003-abc.json", SpoolJob).worker == "w2"


def test_a_job_the_run_path_cannot_take_is_infra_and_the_worker_goes_on(test_track, tmp_path):
    repo = git.Repo.init(tmp_path / "ws")
    for name, content in commit_files(test_track, PRINTS_A_RESULT).items():
        (tmp_path / "ws" / name).write_bytes(content)
    repo.index.add(["train.py", "prepare.py", "track.json"])
    commit = repo.index.commit("baseline").hexsha
    spool = spoolfs.layout(tmp_path / "spool")
    spoolfs.submit(spool, SpoolJob(id="t-0004-abc", workspace=tmp_path / "ws", frozen={},
                                   job=Job(run=RunId.train("0004"), commit=commit, timeout=10)))
    Worker(spool, "w1", tmp_path / "scratch").run(spoolfs.claim_next(spool, "w1"))
    result = spoolfs.read_message(spool / "results" / "t-0004-abc.json", SpoolResult)
    assert result.run is None and "worker w1 could not run the job: ValueError" in result.infra
    assert "missing: prepare.py, track.json" in result.infra
    assert not list((spool / "claimed").iterdir())
