"""Settling what a dead loop left behind: its experiment recorded once as interrupted, its processes
stopped, the branch back at the best commit with a clean tree."""

import json
import subprocess
import time

from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentRecord, ExperimentStatus, now
from agent.recording.recovery import settle_interrupted


def test_the_experiment_in_flight_is_recorded_once_and_its_orphans_stopped(workspace):
    base = workspace.head()
    ledger = Ledger(workspace.dir)
    ledger.append(ExperimentRecord(id="0000", status="keep", commit=base, val_bpb=2.5, description="baseline"))
    change = workspace.commit_train(workspace.file_at("train.py") + "\n# a change\n", "0001: a change")
    workspace.advance_to(change)
    (workspace.dir / "inflight").mkdir()  # the marker as the version before drafts wrote it
    (workspace.dir / "inflight" / "0001.json").write_text(json.dumps(dict(
        id="0001", commit=change, parent=base, description="a change", started=now(), pid=12, proposal={"trial": 3},
        program="program", seed=43)))
    (workspace.dir / "train.py").write_text("half-written by a dead loop")
    run_dir = workspace.runs_dir / "0001"
    run_dir.mkdir(parents=True)
    orphan = subprocess.Popen(["sleep", "60"], cwd=run_dir)
    messages = []
    settle_interrupted(workspace, Ledger(workspace.dir), say=messages.append)
    assert orphan.wait(timeout=10) == -9
    assert messages == ["0001 was interrupted by a stopped loop; recorded once as interrupted"]
    assert workspace.head() == base and workspace.is_clean() and not list((workspace.dir / "inflight").glob("*.json"))
    settle_interrupted(workspace, Ledger(workspace.dir), say=messages.append)  # nothing is left to settle
    records = Ledger(workspace.dir).records
    assert [(r.id, r.status) for r in records] == [("0000", ExperimentStatus.KEEP),
                                                   ("0001", ExperimentStatus.INTERRUPTED)]
    interrupted = records[1]
    assert (interrupted.commit, interrupted.parent, interrupted.triage) == (change, base, "interrupted")
    assert interrupted.proposal == {"trial": 3} and interrupted.program.name == "program"
    assert time.strptime(interrupted.finished, "%Y-%m-%dT%H:%M:%S%z")
    events = [json.loads(line) for line in (workspace.dir / interrupted.transcript).read_text().splitlines()]
    assert [e["type"] for e in events] == ["interrupted"] and len(messages) == 1


def test_an_unreadable_in_flight_marker_only_resets_to_the_best(workspace):
    base = workspace.head()
    ledger = Ledger(workspace.dir)
    ledger.append(ExperimentRecord(id="0000", status="keep", commit=base, val_bpb=2.5))
    workspace.advance_to(workspace.commit_train(workspace.file_at("train.py") + "\n# stray\n", "stray"))
    (workspace.dir / "inflight").mkdir()
    (workspace.dir / "inflight" / "0001.json").write_text('{"id": "0001", "comm')
    (workspace.dir / "current.json").write_text('{"id": "0002", "comm')  # the marker of an older version
    settle_interrupted(workspace, Ledger(workspace.dir), say=lambda _: None)
    assert [r.id for r in Ledger(workspace.dir).records] == ["0000"] and workspace.head() == base
    assert not list((workspace.dir / "inflight").glob("*.json")) and not (workspace.dir / "current.json").exists()


def test_every_experiment_left_in_flight_is_recorded_once(workspace):
    base = workspace.head()
    ledger = Ledger(workspace.dir)
    ledger.append(ExperimentRecord(id="0000", status="keep", commit=base, val_bpb=2.5, description="baseline"))
    for number in (1, 2):
        ledger.save_draft(ExperimentRecord(id=f"000{number}", status="pending", commit=base, parent=base,
                                      description=f"change {number}", started=now()))
    (workspace.dir / "current.json").write_text(json.dumps(dict(id="0003", commit=base, parent=base, started=now())))
    ledger.append(ExperimentRecord(id="0002", status="discard", commit=base, val_bpb=2.6, description="change 2"))
    messages = []
    settle_interrupted(workspace, Ledger(workspace.dir), say=messages.append)
    settle_interrupted(workspace, Ledger(workspace.dir), say=messages.append)
    assert [(r.id, r.status) for r in Ledger(workspace.dir).records] == [
        ("0000", ExperimentStatus.KEEP), ("0002", ExperimentStatus.DISCARD), ("0001", ExperimentStatus.INTERRUPTED),
        ("0003", ExperimentStatus.INTERRUPTED)]
    assert len(messages) == 2 and not list((workspace.dir / "inflight").glob("*.json"))
