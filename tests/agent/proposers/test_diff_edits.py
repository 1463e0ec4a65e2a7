"""An edited copy of train.py back as search/replace edits: each old_string unique in the original, widened by
context where a changed line repeats, and applying them gives the edited copy exactly."""

import random

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


# Lines that repeat, differ only in indentation or trailing text, and end in what str.splitlines also splits at
# (\r, \r\n, form feed, vertical tab, U+2028 inside a string): a crafted copy must still become edits that give
# exactly that copy, never ones that match elsewhere.
CRAFTED_LINES = ["x = 1\n", "y = 2\r\n", "\n", "pass\r", "x = 1  # a\x0c\n", "z = x\n", "    \n", "s = '\u2028'\n",
                 "x = 1\x0b", "if x:\n", "    x = 1\n", "  x = 1\n"]


def test_crafted_copies_become_edits_that_give_exactly_the_copy():
    rng = random.Random(7)
    checked = 0
    for _ in range(3000):
        old = [rng.choice(CRAFTED_LINES) for _ in range(rng.randint(1, 10))]
        new = list(old)
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(new))
            if rng.random() < 0.5 or not new:
                new.insert(at, rng.choice(CRAFTED_LINES))
            else:
                new[min(at, len(new) - 1)] = rng.choice(CRAFTED_LINES) if rng.random() < 0.5 else ""
        original, edited = "".join(old), "".join(new)
        if original == edited or not _parses(edited):
            continue
        assert apply_edits(original, edits_between(original, edited)) == edited, (original, edited)
        checked += 1
    assert checked > 500


def _parses(source: str) -> bool:
    try:
        compile(source, "train.py", "exec")
    except SyntaxError:
        return False
    return True
