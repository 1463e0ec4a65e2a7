"""What a coding CLI leaves in its scratch directory is hostile input: proposal.json must be a valid proposal,
train.py and proposal.json plain files of bounded size, never links to files elsewhere."""

import json

import pytest

from agent.proposers.cli_scratch import BadScratch, edited_train, proposal_file


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
