"""What a coding CLI leaves in its scratch directory is hostile input: proposal.json must be a valid proposal,
train.py, proposal.json and notes.md plain files of bounded size, never links to files elsewhere (which our own
process, not the CLI's sandbox, would read) nor FIFOs (which would block the read)."""

import json
import os

import pytest

from agent.proposers.cli.scratch import MAX_NOTES_BYTES, BadScratch, edited_train, proposal_file, rewritten_notes
from agent.proposers.diff_edits import edits_between
from agent.proposers.edits import EditRejected, apply_edits


def test_a_valid_proposal_is_read(tmp_path):
    (tmp_path / "proposal.json").write_text(json.dumps({"description": "d", "hypothesis": "h", "expected": "e"}))
    written = proposal_file(tmp_path)
    assert (written.description, written.hypothesis, written.expected, written.lesson) == ("d", "h", "e", "")


@pytest.mark.parametrize("content, problem", [
    (None, "no proposal.json was written"),
    ("{not json", "proposal.json is not a valid proposal"),
    (json.dumps({"description": "d", "expected": "e"}), "hypothesis: Field required"),
    (json.dumps({"description": "d", "hypothesis": 3, "expected": "e"}), "hypothesis: Input should be a valid string"),
    (json.dumps({"description": "d", "hypothesis": "h", "expected": "e", "junk": "x" * 30_000}), "over the limit"),
])
def test_a_bad_proposal_says_what_is_wrong(tmp_path, content, problem):
    if content is not None:
        (tmp_path / "proposal.json").write_text(content)
    with pytest.raises(BadScratch, match=problem):
        proposal_file(tmp_path)


def test_links_out_of_the_scratch_directory_are_refused(tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("SECRET = 1\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "train.py").symlink_to(outside)
    with pytest.raises(BadScratch, match="train.py is not a plain file"):
        edited_train(scratch)
    (scratch / "train.py").unlink()
    with pytest.raises(BadScratch, match="train.py is gone"):
        edited_train(scratch)


def test_notes_linked_to_a_file_elsewhere_are_not_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("API_KEY=sk-secret\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "notes.md").symlink_to(secret)
    with pytest.raises(BadScratch, match="notes.md is not a plain file") as refused:
        rewritten_notes(scratch, "old notes")
    assert "sk-secret" not in str(refused.value)


@pytest.mark.parametrize("name", ["train.py", "notes.md", "proposal.json"])
def test_a_fifo_is_refused_without_blocking(tmp_path, name):
    os.mkfifo(tmp_path / name)  # no writer: a plain open() would wait for one forever
    read = {"train.py": edited_train, "proposal.json": proposal_file,
            "notes.md": lambda scratch: rewritten_notes(scratch, "")}[name]
    with pytest.raises(BadScratch, match=f"{name} is not a plain file"):
        read(tmp_path)


def test_notes_far_over_the_limit_are_not_read(tmp_path):
    (tmp_path / "notes.md").write_text("x" * (MAX_NOTES_BYTES + 1))
    with pytest.raises(BadScratch, match=f"notes.md is {MAX_NOTES_BYTES + 1} bytes, over the limit"):
        rewritten_notes(tmp_path, "")
    (tmp_path / "notes.md").write_text("new notes")
    assert rewritten_notes(tmp_path, "old notes") == "new notes"
    assert rewritten_notes(tmp_path, "new notes") is None
    (tmp_path / "notes.md").unlink()
    assert rewritten_notes(tmp_path, "old notes") is None  # deleted notes are left as they were


def test_a_train_py_with_a_null_byte_is_refused_as_an_edit(tmp_path):
    original = "x = 1\ny = 2\n"
    (tmp_path / "train.py").write_bytes(b"x = 1  # \x00\ny = 2\n")
    edits = edits_between(original, edited_train(tmp_path))
    with pytest.raises(EditRejected, match="null bytes"):
        apply_edits(original, edits)
