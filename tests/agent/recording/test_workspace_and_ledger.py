"""Workspace creation and the ledger's atomicity rules."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentRecord
from agent.workspace import Workspace, WorkspaceError

ROOT = Path(__file__).resolve().parents[3]
PROGRAM = ROOT / "prompts" / "program.md"


def test_a_workspace_is_a_repo_with_the_three_files_for_its_track(workspace, test_track):
    assert workspace.repo.active_branch.name == "autoresearch/t"
    assert sorted(workspace.repo.git.ls_files().split()) == ["prepare.py", "track.json", "train.py"]
    assert "# === HYPERPARAMETERS (track: test)" in workspace.file_at("train.py")
    assert workspace.file_at("prepare.py") == (ROOT / "trainer" / "prepare.py").read_text()
    assert json.loads(workspace.file_at("track.json"))["fingerprint"] == test_track.spec["fingerprint"]
    assert workspace.is_clean()
    for name in ("results.tsv", "experiments.jsonl", "logs/0000.log", "runs/0000/train.py", "current.json"):
        path = workspace.dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    assert workspace.is_clean(), "what the loop writes must stay untracked and ignored"


def test_existing_and_bad_tags_are_refused(workspace, test_track):
    with pytest.raises(WorkspaceError, match="already exists: `autoresearch run --tag t` resumes it"):
        Workspace.create("t", test_track.spec, PROGRAM, root=workspace.dir.parent)
    with pytest.raises(WorkspaceError, match="names a path, not a single workspace directory"):
        Workspace.create("../escape", test_track.spec, PROGRAM, root=workspace.dir.parent)
    with pytest.raises(WorkspaceError, match="no workspace for tag 'nope'"):
        Workspace.open("nope", root=workspace.dir.parent)
    assert sorted(p.name for p in workspace.dir.parent.iterdir()) == ["t"]


def record(i, status="discard", val=1.0):
    return ExperimentRecord(id=f"{i:04d}", commit=f"{i:040d}", status=status, val_bpb=val, description=f"e\t{i}\n",
                            peak_vram_mb=2048.0)


def test_ledger_rows_agree_and_a_torn_line_is_dropped(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(record(0, "keep", 2.0))
    ledger.append(record(1, "crash", None))
    with open(tmp_path / "experiments.jsonl", "a") as f:
        f.write('{"id": "0002", "status": "kee')
    reopened = Ledger(tmp_path)
    assert [r.id for r in reopened.records] == ["0000", "0001"]
    assert (tmp_path / "experiments.jsonl").read_text().endswith("}\n")
    assert (tmp_path / "results.tsv").read_text().splitlines()[1:] == [
        "0000000\t2.000000\t2.0\tkeep\te 0", "0000000\t0.000000\t2.0\tcrash\te 1"]
    assert reopened.best().id == "0000"


def test_results_tsv_is_rebuilt_when_it_lags_the_jsonl(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(record(0, "keep", 2.0))
    (tmp_path / "results.tsv").write_text("commit\tval_bpb\tmemory_gb\tstatus\tdescription\n")
    Ledger(tmp_path)
    assert len((tmp_path / "results.tsv").read_text().splitlines()) == 2


def test_cli_init_and_status(test_track, tmp_path):
    env_cache = ["--cache", str(test_track.directory.parent)]
    made = subprocess.run([sys.executable, "-m", "agent.cli", "init", "--tag", "cli", "--track", "test",
                           "--workspaces", str(tmp_path), *env_cache], capture_output=True, text=True, cwd=ROOT)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "created" in made.stdout and (tmp_path / "cli" / "train.py").exists()
    again = subprocess.run([sys.executable, "-m", "agent.cli", "init", "--tag", "cli", "--track", "test",
                            "--workspaces", str(tmp_path), *env_cache], capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 2 and "already exists" in again.stdout
    shown = subprocess.run([sys.executable, "-m", "agent.cli", "status", "--tag", "cli", "--workspaces",
                            str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert shown.returncode == 0 and "no experiments yet" in shown.stdout
    missing = subprocess.run([sys.executable, "-m", "agent.cli", "status", "--tag", "none", "--workspaces",
                              str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 2 and "no workspace for tag 'none'" in missing.stdout


def test_commits_of_experiments_move_nothing_until_one_is_kept(workspace):
    best = workspace.head()
    source = workspace.file_at("train.py")
    first = workspace.commit_train(source + "\n# first\n", "0001: first")
    second = workspace.commit_train(source + "\n# second\n", "0002: second", parent=best)
    assert workspace.head() == best and workspace.is_clean()
    assert (workspace.dir / "train.py").read_text() == source
    assert workspace.file_at("train.py", second).endswith("# second\n")
    assert [p.hexsha for p in workspace.repo.commit(first).parents] == [best]
    assert set(workspace.repo.commit(first).tree.blobs[i].path for i in range(3)) == {"train.py", "prepare.py",
                                                                                      "track.json"}
    workspace.advance_to(first)
    assert workspace.head() == first and workspace.is_clean()
    assert (workspace.dir / "train.py").read_text().endswith("# first\n")
    with pytest.raises(WorkspaceError, match="was not made on the best"):
        workspace.advance_to(second)  # its parent is no longer the best
    assert workspace.head() == first


def test_the_best_is_the_lowest_keep_and_its_weights_stay_while_the_loop_builds_on_the_head(tmp_path):
    """A keep that simplified at a small cost moves the head, not the best: views name the lowest keep, the loop
    builds on the head, and the best's weights are kept for `confirm`."""
    ledger = Ledger(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    for number, (status, value) in enumerate([("keep", 1.0), ("keep", 0.9), ("discard", 0.95), ("keep", 0.92)]):
        checkpoint = f"checkpoints/{number:04d}.pt"
        (tmp_path / checkpoint).write_bytes(b"weights")
        ledger.append(ExperimentRecord(id=f"{number:04d}", status=status, commit=f"c{number}", val_bpb=value,
                                       checkpoint=checkpoint, description=f"change {number}"))
    assert (ledger.best().id, ledger.head().id) == ("0001", "0003")
    ledger.prune_checkpoints(set())
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["0000.pt", "0001.pt", "0003.pt"]
