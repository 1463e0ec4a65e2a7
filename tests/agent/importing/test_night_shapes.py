"""`autoresearch import` on the shapes real nights have: a clone whose night branch is remote-only with results.tsv
committed on it, the reference's `baseline` first row, forks' extra columns, statuses and Windows line ends, a
last keep that is not the best, other constants, a shallow clone. Each imports without an edit; `status` names the
lowest keep and `report` writes the page, through the CLI a user types."""

from __future__ import annotations

import re
import time
from pathlib import Path

import git
import pytest
from typer.testing import CliRunner

from agent import cli
from agent.importing.reference_import import import_reference
from agent.importing.reference_night import ReferenceImportError
from agent.loop import LoopSettings, LoopStopped, run_loop
from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentStatus
from agent.workspace import Workspace
from tests.helpers.reference_checkout import HEADER, PROGRAM, REFERENCE_PREPARE, Checkout, reference_night
from tests.helpers.synthetic_runner import SyntheticRunner


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(tmp_path / "cache"))


def typed(*words: str) -> str:
    """What the CLI printed for `autoresearch WORDS`; fails on a non-zero exit."""
    result = CliRunner().invoke(cli.app, list(words), terminal_width=400)
    assert result.exit_code == 0, result.output
    return result.output


def imported_and_read(source: Path, root: Path, *options: str) -> tuple[str, str, str, Workspace]:
    """import, then status and report of the new tag: (import's words, status's words, the page, the workspace)."""
    said = typed("import", "--from", str(source), "--workspaces", str(root), *options)
    tag = re.search(r"into \S+/([^/\s]+) \(track", said).group(1)
    status = typed("status", "--tag", tag, "--workspaces", str(root))
    typed("report", "--tag", tag, "--workspaces", str(root))
    workspace = Workspace.open(tag, root)
    return said, status, (workspace.dir / "report" / "index.html").read_text(), workspace


def published(checkout: Checkout) -> None:
    """results.tsv committed on the night's branch, as people publish a night."""
    checkout.write_results()
    checkout.repo.index.add(["results.tsv"])
    checkout.repo.index.commit("results of the night")


def test_a_clone_whose_night_is_remote_only_with_its_results_committed_there(tmp_path, empty_cache):
    original, commits = reference_night(tmp_path / "owner")
    published(original)
    original.repo.git.checkout("master")
    clone = git.Repo.clone_from(original.path, tmp_path / "autoresearch")
    assert [h.name for h in clone.heads] == ["master"] and not (tmp_path / "autoresearch" / "results.tsv").exists()

    said, status, page, workspace = imported_and_read(tmp_path / "autoresearch", tmp_path / "ws")
    assert "read branch origin/autoresearch/dec4 (remote) and results.tsv on origin/autoresearch/dec4" in said
    assert workspace.tag == "dec4" and len(Ledger(workspace.dir).records) == 6
    assert f"best val_bpb 0.990200 ({commits['keep2'][:7]}, warmdown 0.6)" in status
    assert "warmdown 0.6" in page
    assert "their diffs are not available: 0badc0d" in said and "diff not available" not in page  # no keep lost

    # a branch outside autoresearch/ (the reference's exp/H100/mar8) is named as the user sees it, or without origin/
    original.repo.git.branch("exp/H100/mar8", "autoresearch/dec4")
    clone.remotes.origin.fetch()
    said, _, _, workspace = imported_and_read(clone.working_dir, tmp_path / "ws", "--branch", "exp/H100/mar8")
    assert "read branch origin/exp/H100/mar8 (remote)" in said and workspace.tag == "autoresearch-exp-H100-mar8"


def test_without_a_night_branch_the_refusal_lists_the_remote_ones(tmp_path, empty_cache):
    original, _ = reference_night(tmp_path / "owner")
    published(original)
    original.repo.git.branch("-m", "autoresearch/dec4", "exp/H100/mar8")
    original.repo.git.checkout("master")
    git.Repo.clone_from(original.path, tmp_path / "clone")
    with pytest.raises(ReferenceImportError, match=r"no autoresearch/<tag> branches; its branches are master, "
                                                   r"origin/exp/H100/mar8 \(remote\), origin/master \(remote\): "
                                                   "name the night's branch with --branch"):
        import_reference(tmp_path / "clone", PROGRAM, root=tmp_path / "ws")
    assert not (tmp_path / "ws").exists()


def test_the_reference_baseline_row_is_where_the_branch_started(tmp_path, empty_cache):
    checkout, commits = reference_night(tmp_path / "reference")
    first = checkout.rows[0].split("\t", 1)[1]
    checkout.rows[0] = f"baseline\t{first}"
    checkout.write_results()

    said, status, _, workspace = imported_and_read(checkout.path, tmp_path / "ws")
    assert f"the baseline row's commit `baseline` is {commits['baseline'][:7]}, where the branch started" in said
    baseline = Ledger(workspace.dir).records[0]
    assert baseline.imported.reference_commit == commits["baseline"][:7] and baseline.imported.status == "keep"
    assert workspace.file_at("train.py", baseline.commit) == checkout.repo.commit(commits["baseline"]).tree[
        "train.py"].data_stream.read().decode()
    assert "baseline 0.997900" in status and "best val_bpb 0.990200" in status


def test_forks_columns_statuses_byte_order_mark_and_crlf_are_read_by_name(tmp_path, empty_cache):
    checkout = Checkout(tmp_path / "fork")
    base = checkout.repo.head.commit.hexsha
    tentative = checkout.experiment("DEPTH = 8", "DEPTH = 9", "deeper, tentatively")
    checkout.reset_to(base)
    repaired = checkout.experiment("DEPTH = 8", "DEPTH = 10", "a fix that failed too")
    checkout.reset_to(base)
    best = checkout.experiment("MATRIX_LR = 0.04", "MATRIX_LR = 0.05", "matrix lr")
    rows = ["commit\tval_bpb\tstatus\tdescription\tmemory_gb\tmfu\ttok_per_sec\tgpu\tHypothesis",
            f"{base[:7]}\t0.998000\tbaseline\tbaseline\t44.0\t39.8\t1660000\tRTX 5070\t",
            f"{tentative[:7]}\t0.997000\ttentative\tdeeper\t50.1\t38.0\t1500000\tRTX 5070\tdepth buys loss",
            f"{repaired[:7]}\t0.000000\trepair\tdeeper still, crashed\t0.0\t0\t0\tRTX 5070\tmore depth",
            f"{best[:7]}\t0.995000\tBEST\tmatrix lr 0.05\t44.0\t39.9\t1665000\tRTX 5070\tlr too low",
            f"{best[:7]}\t0.996500\tsupport\tmatrix lr 0.05 again, another seed\t44.0\t39.9\t1665000\tRTX 5070\t"]
    (checkout.path / "results.tsv").write_bytes(("\ufeff" + "\r\n".join(rows) + "\r\n").encode("utf-8"))

    said, status, page, workspace = imported_and_read(checkout.path, tmp_path / "ws")
    assert ("statuses read as ours: baseline -> keep, tentative -> discard, repair -> crash, BEST -> keep, "
            "support -> discard") in said
    records = Ledger(workspace.dir).records
    assert [r.status for r in records] == [ExperimentStatus.KEEP, ExperimentStatus.DISCARD, ExperimentStatus.CRASH,
                                           ExperimentStatus.KEEP, ExperimentStatus.DISCARD]
    assert records[1].imported.extra == {"mfu": "38.0", "tok_per_sec": "1500000", "gpu": "RTX 5070",
                                         "Hypothesis": "depth buys loss"}
    assert records[1].hypothesis == "depth buys loss" and "depth buys loss" in page  # shown as a hypothesis
    assert records[1].peak_vram_mb == pytest.approx(50.1 * 1024) and records[2].val_bpb is None
    assert "best val_bpb 0.995000" in status and "hardware RTX 5070" in status
    tsv = (workspace.dir / "results.tsv").read_text().splitlines()
    assert tsv[0] == HEADER.strip() and all(len(line.split("\t")) == 5 for line in tsv)  # ours: the five columns
    assert "tentative -&gt; discard" in page


def test_the_best_is_the_lowest_keep_not_the_last(tmp_path, empty_cache):
    checkout = Checkout(tmp_path / "macos")
    base = checkout.repo.head.commit.hexsha
    better = checkout.experiment("MATRIX_LR = 0.04", "MATRIX_LR = 0.05", "lr")
    simpler = checkout.experiment("WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.4", "simpler, slightly worse")
    for commit, value, what in ((base, 1.401, "baseline"), (better, 1.382862, "matrix lr 0.05"),
                                (simpler, 1.389153, "warmdown 0.4, simpler")):
        checkout.row(commit, value, 9.0, "keep", what)
    checkout.write_results()

    _, status, page, workspace = imported_and_read(checkout.path, tmp_path / "ws")
    assert f"best val_bpb 1.382862 ({better[:7]}, matrix lr 0.05)" in status
    assert f"the branch head is the last keep, 0002 ({simpler[:7]}, warmdown 0.4, simpler)" in status
    assert "1.401000 → 1.382862" in page and "kept or discarded by the night's own agent" in page
    assert Ledger(workspace.dir).best().id == "0001" and Ledger(workspace.dir).head().id == "0002"


MLX_PREPARE = REFERENCE_PREPARE.format(seq=2048).replace("40 * 524288", "3 * 524288").replace("= 300 ", "= 1200 ")


def test_a_night_under_other_constants_is_readable_and_run_refuses_it_in_its_own_words(tmp_path, empty_cache):
    checkout, _ = reference_night(tmp_path / "mlx")
    (checkout.path / "prepare.py").write_text(MLX_PREPARE)
    checkout.repo.index.add(["prepare.py"])
    checkout.repo.index.commit("the MLX fork's constants")

    said, status, page, workspace = imported_and_read(checkout.path, tmp_path / "ws")
    assert "(track imported, branch autoresearch/dec4)" in said
    words = ("TIME_BUDGET = 1200 where track gpu has 300; EVAL_TOKENS = 3 * 524288 (1572864) where track gpu has "
             "20971520")
    assert words in said and words in status and "ran under MAX_SEQ_LEN = 2048, TIME_BUDGET = 1200" in status
    assert "best val_bpb 0.990200" in status and "hardware not recorded by the night" in page
    assert workspace.track.constants.eval_tokens == 3 * 524288

    typed("import", "--from", str(tmp_path / "mlx"), "--workspaces", str(tmp_path / "ws"), "--tag", "again")
    typed("report", "--tag", "dec4", "--tag", "again", "--workspaces", str(tmp_path / "ws"))
    result = CliRunner().invoke(cli.app, ["run", "--tag", "dec4", "--workspaces", str(tmp_path / "ws"),
                                          "--max-experiments", "1"], terminal_width=400)
    assert result.exit_code == 2 and "cannot continue" in result.output and words in result.output
    with pytest.raises(LoopStopped, match="EVAL_TOKENS = 3 \\* 524288"):
        run_loop(workspace, None, SyntheticRunner({}), LoopSettings(max_experiments=1), say=lambda _: None)
    assert len(Ledger(workspace.dir).records) == 6


def test_a_shallow_clone_imports_readable_and_says_how_to_fetch_the_baseline(tmp_path, empty_cache):
    original, commits = reference_night(tmp_path / "owner")
    published(original)
    git.Repo.clone_from(f"file://{original.path}", tmp_path / "shallow", depth=1)

    said, status, _, workspace = imported_and_read(tmp_path / "shallow", tmp_path / "ws")
    assert "best val_bpb 0.990200" in status
    assert (f"the baseline's commit {commits['baseline'][:7]} is not in the checkout, so the night's starting train.py "
            "is unknown: it is a shallow clone; run `git fetch --unshallow` in it") in said
    assert len(Ledger(workspace.dir).records) == 6


def test_rows_of_another_branch_are_refused_naming_them(tmp_path, empty_cache):
    checkout, commits = reference_night(tmp_path / "reference")
    checkout.repo.git.checkout("-b", "autoresearch/other", commits["baseline"])
    checkout.experiment("DEPTH = 8", "DEPTH = 6", "shallower")
    other = checkout.experiment("MATRIX_LR = 0.04", "MATRIX_LR = 0.03", "lower lr")
    checkout.row(other, 0.9899, 40.0, "keep", "lower lr")  # a row of autoresearch/other in dec4's results.tsv
    checkout.write_results()
    checkout.repo.git.checkout("autoresearch/dec4")
    with pytest.raises(ReferenceImportError, match=rf"line\(s\) 8 \({other[:7]}\) are not on autoresearch/dec4's "
                                                   "history"):
        import_reference(checkout.path, PROGRAM, branch="dec4", root=tmp_path / "ws")
    assert not (tmp_path / "ws" / "dec4").exists()


def test_every_bad_line_is_named_in_one_refusal(tmp_path, empty_cache):
    checkout, _ = reference_night(tmp_path / "reference")
    checkout.write_results("not-a-sha\t0.99\t44.0\tkeep\tx\nabcdef0\tfast\t44.0\tkeep\ty\nabcdef1\t0.99\n")
    (checkout.path / "prepare.py").write_text(REFERENCE_PREPARE.format(seq=2048).replace("8192", "2 ** 62 * 8"))
    checkout.repo.index.add(["prepare.py"])
    checkout.repo.index.commit("a vocabulary no machine holds")
    with pytest.raises(ReferenceImportError) as refused:
        import_reference(checkout.path, PROGRAM, root=tmp_path / "ws")
    for words in ("line 8: commit 'not-a-sha'", "line 9: val_bpb 'fast'", "line 10: 2 column(s)",
                  "sets VOCAB_SIZE = 2 ** 62 * 8, a number beyond 2**63"):
        assert words in str(refused.value)


@pytest.mark.parametrize("expression", ["10 ** 10 ** 8", "9 ** 9 ** 9 ** 9", "(2 ** 63) ** 64 ** 64",
                                        " * ".join(["99999999"] * 5000), "(" * 5000 + "1" + ")" * 5000,
                                        "1" + "0" * 100_000])
def test_hostile_constants_are_refused_at_once(expression, tmp_path, empty_cache):
    checkout, _ = reference_night(tmp_path / "reference")
    (checkout.path / "prepare.py").write_text(REFERENCE_PREPARE.format(seq=2048).replace("40 * 524288", expression))
    checkout.repo.index.add(["prepare.py"])
    checkout.repo.index.commit("hostile")
    started = time.monotonic()
    with pytest.raises(ReferenceImportError, match="EVAL_TOKENS|does not parse"):
        import_reference(checkout.path, PROGRAM, root=tmp_path / "ws")
    assert time.monotonic() - started < 5  # the bound: a hostile constant is refused, never computed


def test_a_long_description_is_clipped_at_import(tmp_path, empty_cache):
    checkout, _ = reference_night(tmp_path / "reference")
    checkout.rows[-1] = checkout.rows[-1].rstrip("\n") + " " + "x" * 200_000 + "\n"
    checkout.write_results()
    night = import_reference(checkout.path, PROGRAM, root=tmp_path / "ws")
    assert len(Ledger(night.workspace.dir).records[-1].description) < 600


def test_a_discard_without_val_bpb_imports_and_column_names_keep_their_case(tmp_path, empty_cache):
    checkout, _ = reference_night(tmp_path / "moe")
    text = (checkout.path / "results.tsv").read_text().replace("0.995500\t60.2\tdiscard", "0.000000\t60.2\tdiscard")
    lines = [line + ("\tnum_params_M" if number == 0 else "\t50.3") for number, line in enumerate(text.splitlines())]
    (checkout.path / "results.tsv").write_text("\n".join(lines) + "\n")
    night = import_reference(checkout.path, PROGRAM, root=tmp_path / "ws")
    discard = Ledger(night.workspace.dir).records[2]
    assert (discard.status, discard.val_bpb) == (ExperimentStatus.DISCARD, None)
    assert discard.imported.extra == {"num_params_M": "50.3"}


@pytest.mark.parametrize("damage, expected", [
    ("twice", "line 1 names the column(s) val_bpb more than once"),
    ("link", "results.tsv is not a plain file (a link, or nothing to read)"),
    ("half", "sets EVAL_TOKENS = 2 ** -1, which is 0.5, not a positive whole number"),
])
def test_what_a_stranger_plants_is_refused_without_showing_it(damage, expected, tmp_path, empty_cache):
    checkout, _ = reference_night(tmp_path / "reference")
    results = checkout.path / "results.tsv"
    secret = tmp_path / "secret"
    secret.write_text("root:SECRET-HASH:20228\n")
    if damage == "twice":
        results.write_text(results.read_text().replace("description", "description\tval_bpb", 1))
    elif damage == "link":
        results.unlink()
        results.symlink_to(secret)
    else:
        (checkout.path / "prepare.py").write_text(REFERENCE_PREPARE.format(seq=2048).replace("40 * 524288",
                                                                                             "2 ** -1"))
        checkout.repo.index.add(["prepare.py"])
        checkout.repo.index.commit("half a token")
    with pytest.raises(ReferenceImportError, match=re.escape(expected)) as refused:
        import_reference(checkout.path, PROGRAM, root=tmp_path / "ws")
    assert "SECRET" not in str(refused.value) and not (tmp_path / "ws").exists()
