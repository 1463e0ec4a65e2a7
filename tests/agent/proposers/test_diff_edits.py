"""An edited copy of train.py back as search/replace edits: each old_string unique in the original, widened by
context where a changed line repeats, and applying them gives the edited copy exactly."""

import pytest

from agent.proposers.diff_edits import edits_between
from agent.proposers.edits import apply_edits

SOURCE = """\
LR = 0.1
DEPTH = 4


def first():
    return 1


def second():
    return 1


def third():
    x = 0
    return x
"""


@pytest.mark.parametrize("edited", [
    SOURCE.replace("LR = 0.1", "LR = 0.2"),                                          # one unique line
    SOURCE.replace("def second():\n    return 1", "def second():\n    return 2"),    # a line that repeats
    SOURCE.replace("LR = 0.1\n", "").replace("    x = 0\n", "    x = 0\n    x += 1\n"),  # a removal and an insertion
    SOURCE + "\n\ndef fourth():\n    return 1\n",                                      # appended at the end
    SOURCE.replace("    return 1\n", "    return 1  # same\n"),                       # every repeat changed alike
])
def test_edits_rebuild_the_edited_copy_with_unique_old_strings(edited):
    edits = edits_between(SOURCE, edited)
    assert apply_edits(SOURCE, edits) == edited
    assert all(SOURCE.count(edit.old_string) == 1 for edit in edits)


def test_a_repeated_line_is_quoted_with_the_context_that_makes_it_unique():
    (edit,) = edits_between(SOURCE, SOURCE.replace("def second():\n    return 1", "def second():\n    return 2"))
    assert edit.old_string == "def second():\n    return 1\n"
    assert edit.new_string == "def second():\n    return 2\n"


def test_an_unchanged_copy_gives_no_edits():
    assert edits_between(SOURCE, SOURCE) == []
