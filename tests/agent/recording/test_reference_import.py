"""`autoresearch import`: a night of the reference autoresearch loop, made here as the reference leaves one (a
branch of kept commits, discards and crashes reset away but still objects, an untracked results.tsv), brought in
as a workspace that status, report, the research memory and `run` work on."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from agent import cli
from agent.importing import reference_import
from agent.importing.reference_import import import_reference
from agent.importing.reference_night import ReferenceImportError
from agent.llm.types import ToolCall
from agent.loop import LoopSettings, LoopStopped, run_loop
from agent.proposers.base import Proposal, Proposer
from agent.proposers.edits import Edit
from agent.proposers.toolbox import ToolBox, history_table
from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentStatus
from agent.workspace import Workspace
from tests.helpers.reference_checkout import HEADER, PROGRAM, REFERENCE_PREPARE, TRAINER, Checkout, reference_night
from tests.helpers.synthetic_runner import SyntheticRunner
from trainer.prepare import TRACKS
from trainer.tracks.hyperparameters import train_source_for_track


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(tmp_path / "cache"))


def test_a_reference_night_becomes_a_workspace_that_status_report_and_memory_read(tmp_path, empty_cache):
    checkout, commits = reference_night(tmp_path / "reference")
    assert not checkout.repo.is_ancestor(commits["discard"], "HEAD")  # reset away, an object still
    night = import_reference(checkout.path, PROGRAM, root=tmp_path / "workspaces")
    workspace = night.workspace
    assert (workspace.tag, workspace.branch, night.track) == ("dec4", "autoresearch/dec4", "gpu")
    assert (night.experiments, night.keeps, night.without_diff) == (6, 2, ["0badc0d"])

    records = Ledger(workspace.dir).records
    assert [r.status for r in records] == [ExperimentStatus.KEEP, ExperimentStatus.KEEP, ExperimentStatus.DISCARD,
                                           ExperimentStatus.CRASH, ExperimentStatus.DISCARD, ExperimentStatus.KEEP]
    assert [r.imported.reference_commit for r in records] == [
        *(commits[name][:7] for name in ("baseline", "keep1", "discard", "crash")), "0badc0d", commits["keep2"][:7]]
    assert [r.imported.line for r in records] == [2, 3, 4, 5, 6, 7]
    assert [r.proposer for r in records] == ["baseline"] + ["reference"] * 5
    assert [r.val_bpb for r in records] == [0.9979, 0.9931, 0.9955, None, 0.996, 0.9902]
    assert records[2].peak_vram_mb == pytest.approx(60.2 * 1024)

    # the branch is the keeps, in order, each with its train.py; the best is the last keep and the head
    base, keep1, discard, crash, lost, keep2 = records
    assert base.commit == workspace.root_commit() and keep2.commit == workspace.head()
    chain = [c.hexsha for c in workspace.repo.iter_commits(workspace.branch)][::-1]
    assert chain == [base.commit, keep1.commit, keep2.commit]
    assert Ledger(workspace.dir).best().id == keep2.id
    for record, name in ((base, "baseline"), (keep1, "keep1"), (discard, "discard"), (keep2, "keep2")):
        assert workspace.file_at("train.py", record.commit) == checkout.repo.commit(commits[name]).tree[
            "train.py"].data_stream.read().decode()
    assert workspace.file_at("prepare.py", base.commit) == (TRAINER / "prepare.py").read_text()  # this harness's
    assert discard.parent == keep1.commit and not workspace.repo.is_ancestor(discard.commit, workspace.head())

    # diffs: `git diff parent commit -- train.py` of the checkout; none for the row whose commit is gone
    assert "-DEPTH = 8\n+DEPTH = 12" in discard.diff and "-MATRIX_LR = 0.04\n+MATRIX_LR = 0.05" in keep1.diff
    assert "+DEPTH = 64" in crash.diff and "+WARMDOWN_RATIO = 0.6" in keep2.diff
    assert lost.commit == "" and lost.diff == "" and not lost.imported.diff_available
    assert all(r.imported.diff_available for r in records if r is not lost)

    # results.tsv: the reference's five columns, its numbers as they were
    tsv = (workspace.dir / "results.tsv").read_text().splitlines()
    assert tsv[0] == HEADER.strip() and all(len(line.split("\t")) == 5 for line in tsv)
    reference_rows = [row.strip().split("\t")[1:] for row in checkout.rows]
    assert [line.split("\t")[1:] for line in tsv[1:]] == reference_rows

    # status
    result = CliRunner().invoke(cli.app, ["status", "--tag", "dec4", "--workspaces", str(tmp_path / "workspaces")],
                                terminal_width=300)
    assert result.exit_code == 0, result.output
    assert "6 experiments, 2 kept besides the baseline, keep rate 40%" in result.output
    assert f"best val_bpb 0.990200 ({commits['keep2'][:7]}, warmdown 0.6)" in result.output  # the night's commit id
    assert "duty cycle not recorded" in result.output and "LLM: tokens and cost not recorded" in result.output
    assert "imported from" in result.output and "cannot continue" in result.output

    # the research memory: the history table and the diffs the proposer's tools show
    table = history_table(records)
    assert re.search(r"0005\s+\* keep\s+0\.990200.*warmdown 0\.6", table)
    assert "depth 64 (OOM)" in table and re.search(r"0003\s+crash", table)
    tools = ToolBox(workspace.dir, {}, records)
    shown = tools.run(ToolCall("c1", "show_diff", {"experiment_id": "0002"})).content
    assert "+DEPTH = 12" in shown
    assert "diff not available" in tools.run(ToolCall("c2", "show_diff", {"experiment_id": "0004"})).content

    # the report, in both plot styles
    for style in ("ours", "reference"):
        result = CliRunner().invoke(cli.app, ["report", "--tag", "dec4", "--workspaces", str(tmp_path / "workspaces"),
                                              "--plot-style", style])
        assert result.exit_code == 0, result.output
        page = (workspace.dir / "report" / "index.html").read_text()
        assert "warmdown 0.6" in page and "depth 64 (OOM)" in page
        png = (workspace.dir / "report" / "progress.png").read_bytes()
        assert png.startswith(b"\x89PNG")
        if style == "ours":
            ours = png
    assert png != ours
    result = CliRunner().invoke(cli.app, ["report", "--tag", "dec4", "--workspaces", str(tmp_path / "workspaces"),
                                          "--plot-style", "notebook"])
    assert result.exit_code == 2 and "ours, reference" in result.output


def test_run_refuses_the_reference_train_py_saying_why(tmp_path, empty_cache):
    checkout, _ = reference_night(tmp_path / "reference")
    night = import_reference(checkout.path, PROGRAM, tag="night", root=tmp_path / "workspaces")
    assert "defines no GPTConfig or build_model" in night.cannot_continue
    assert "autoresearch prepare --track gpu" in night.cannot_continue
    with pytest.raises(LoopStopped, match="imported from a reference night and cannot continue.*build_model"):
        run_loop(night.workspace, Changes("MATRIX_LR = 0.06"), SyntheticRunner({}), LoopSettings(max_experiments=1),
                 say=lambda _: None)
    assert len(Ledger(night.workspace.dir).records) == 6
    result = CliRunner().invoke(cli.app, ["run", "--tag", "night", "--workspaces", str(tmp_path / "workspaces"),
                                          "--max-experiments", "1"])
    assert result.exit_code == 2 and "cannot continue" in result.output, result.output
    result = CliRunner().invoke(cli.app, ["import", "--from", str(checkout.path), "--tag", "again",
                                          "--workspaces", str(tmp_path / "workspaces")], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert "imported 6 experiments (2 kept besides the baseline)" in result.output
    assert "diffs are not available: 0badc0d" in result.output
    assert "`run --tag again` refuses it" in result.output


class Changes(Proposer):
    """Proposes `NAME = value` changes in order, against the train.py it is given."""
    name = "changes"

    def __init__(self, *changes: str):
        self.changes = list(changes)
        self.proposed_on: list[str] = []

    def propose(self, context, transcript):
        change = self.changes.pop(0)
        setting = change.split(" = ")[0]
        line = re.search(rf"^{setting} = .*$", context.train_source, re.MULTILINE).group(0)
        self.proposed_on.append(context.train_source)
        return Proposal(f"{setting} -> {change.split(' = ')[1]}", [Edit(line, change)])


def test_a_night_whose_train_py_fits_the_harness_goes_on_from_its_best(tmp_path, test_track, monkeypatch):
    # The reference's constants are the gpu track's, which a test cannot prepare; here the night ran under the
    # test track's constants and the importer is given a wall-clock test track to match them against.
    monkeypatch.setattr(reference_import, "TRACKS", {"test": dict(TRACKS["test"], step_budget=None)})
    train = train_source_for_track((TRAINER / "train.py").read_text(), "test")
    checkout = Checkout(tmp_path / "reference", train)
    (checkout.path / "prepare.py").write_text(REFERENCE_PREPARE.format(seq=128).replace("300", "5").replace(
        "40 * 524288", "256 * 128").replace("8192", "1024"))
    checkout.repo.index.add(["prepare.py"])
    baseline = checkout.repo.index.commit("the test track's constants").hexsha
    checkout.row(baseline, 1.6, 0.1, "keep", "baseline")
    matrix = re.search(r"^MATRIX_LR = .*$", train, re.MULTILINE).group(0)
    kept = checkout.experiment(matrix, "MATRIX_LR = 0.05", "matrix lr 0.05")
    checkout.row(kept, 1.59, 0.1, "keep", "matrix lr 0.05")
    checkout.write_results()

    night = import_reference(checkout.path, PROGRAM, root=tmp_path / "workspaces")
    assert night.cannot_continue is None and night.track == "test"
    workspace = Workspace.open("dec4", tmp_path / "workspaces")
    best = Ledger(workspace.dir).best()
    proposer = Changes("WARMDOWN_RATIO = 0.6")
    why = run_loop(workspace, proposer, SyntheticRunner({"WARMDOWN_RATIO = 0.6": 0.5}),
                   LoopSettings(max_experiments=1, noise_seeds=0), say=lambda _: None)
    assert "ran 1 experiment" in why
    records = Ledger(workspace.dir).records
    assert [r.id for r in records] == ["0000", "0001", "0002"]
    assert "MATRIX_LR = 0.05" in proposer.proposed_on[0]  # proposed against the imported best
    assert records[-1].parent == best.commit and records[-1].proposer == "changes"
    assert records[-1].status == ExperimentStatus.KEEP and workspace.head() == records[-1].commit


@pytest.mark.parametrize("damage, expected", [
    ("no git", "is not a git checkout"),
    ("no results", "no results.tsv in"),
    ("short row", "results.tsv: line 8: 3 column(s) where the header has 5"),
    ("bad number", "results.tsv: line 8: val_bpb 'fast' is not a positive number, and the row is a keep"),
    ("bad commit", "results.tsv: line 8: commit 'not-a-sha' is not a hexadecimal commit id"),
    ("bad header", "results.tsv: line 1 has no val_bpb column"),
    ("hostile constant", "prepare.py on autoresearch/dec4 sets EVAL_TOKENS = 10 ** 10 ** 8, an exponent above 64"),
    ("existing tag", "already exists: import under another --tag"),
])
def test_bad_input_is_refused_naming_what_is_wrong_and_loses_nothing(damage, expected, tmp_path, empty_cache):
    checkout, _ = reference_night(tmp_path / "reference")
    root = tmp_path / "workspaces"
    source = checkout.path
    results = checkout.path / "results.tsv"
    if damage == "no git":
        source = tmp_path / "plain"
        source.mkdir()
        (source / "results.tsv").write_text(results.read_text())
    elif damage == "no results":
        results.unlink()
    elif damage == "short row":
        checkout.write_results("abcdef0\t0.99\tkeep\n")
    elif damage == "bad number":
        checkout.write_results("abcdef0\tfast\t44.0\tkeep\tx\n")
    elif damage == "bad commit":
        checkout.write_results("not-a-sha\t0.99\t44.0\tkeep\tx\n")
    elif damage == "bad header":
        results.write_text(results.read_text().replace("val_bpb", "val_loss"))
    elif damage == "hostile constant":
        (checkout.path / "prepare.py").write_text(REFERENCE_PREPARE.format(seq=2048).replace(
            "40 * 524288", "10 ** 10 ** 8"))
        checkout.repo.index.add(["prepare.py"])
        checkout.repo.index.commit("a constant no machine computes")
    elif damage == "existing tag":
        (root / "dec4").mkdir(parents=True)
        (root / "dec4" / "keep.txt").write_text("mine")
    before = results.read_text() if results.exists() else None
    with pytest.raises(ReferenceImportError, match=re.escape(expected)):
        import_reference(source, PROGRAM, root=root)
    if damage == "existing tag":
        assert (root / "dec4" / "keep.txt").read_text() == "mine"
    else:
        assert not (root / "dec4").exists()
    if before is not None:
        assert results.read_text() == before
    result = CliRunner().invoke(cli.app, ["import", "--from", str(source), "--workspaces", str(root)])
    assert result.exit_code == 2 and result.output.startswith("error: "), result.output
