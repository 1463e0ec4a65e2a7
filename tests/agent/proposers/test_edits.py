"""apply_edits: strict search/replace on train.py, all or none, with messages a model can act on."""

from pathlib import Path

import pytest

from agent.proposers.edits import Edit, EditRejected, apply_edits

TRAIN = (Path(__file__).resolve().parents[3] / "trainer" / "train.py").read_text()
TRAIN_LINES = TRAIN.splitlines()
DEPTH_LINE = "DEPTH = 8                  # transformer blocks"


def line_number(text: str) -> int:
    return TRAIN_LINES.index(text) + 1


def rejection(source: str, edits: list[Edit]) -> str:
    with pytest.raises(EditRejected) as info:
        apply_edits(source, edits)
    return str(info.value)


def test_a_unique_exact_match_is_replaced_and_nothing_else_changes():
    new_line = "DEPTH = 12                 # transformer blocks"
    result = apply_edits(TRAIN, [Edit(DEPTH_LINE, new_line)])
    expected = list(TRAIN_LINES)
    expected[line_number(DEPTH_LINE) - 1] = new_line
    assert result.splitlines() == expected
    assert result.endswith("\n")


def test_the_path_may_be_written_with_a_leading_dot_slash():
    result = apply_edits(TRAIN, [Edit(DEPTH_LINE, DEPTH_LINE.replace("8", "6", 1), path="./train.py")])
    assert "DEPTH = 6 " in result


def test_edits_apply_in_order_each_to_the_result_of_the_previous():
    source = "a = 1\nb = 2\n"
    edits = [Edit("a = 1", "a = 10"), Edit("a = 10\nb = 2", "a = 10\nb = 20")]
    assert apply_edits(source, edits) == "a = 10\nb = 20\n"


def test_a_later_edit_on_the_real_file_sees_the_earlier_one():
    edits = [Edit("DEPTH = 8 ", "DEPTH = 12"), Edit("DEPTH = 12", "DEPTH = 16")]
    result = apply_edits(TRAIN, edits)
    assert result.splitlines()[line_number(DEPTH_LINE) - 1] == "DEPTH = 16                 # transformer blocks"


def test_a_block_quoted_without_its_indentation_is_found_and_the_replacement_reindented():
    old = "if progress < WARMUP_RATIO:\n    return progress / WARMUP_RATIO\n"
    new = "if progress < WARMUP_RATIO:\n    return (progress / WARMUP_RATIO) ** 2\n"
    assert old not in TRAIN
    start = line_number("    if progress < WARMUP_RATIO:")

    result = apply_edits(TRAIN, [Edit(old, new)]).splitlines()

    assert result[start - 1:start + 1] == ["    if progress < WARMUP_RATIO:",
                                           "        return (progress / WARMUP_RATIO) ** 2"]
    assert result[:start - 1] == TRAIN_LINES[:start - 1]
    assert result[start + 1:] == TRAIN_LINES[start + 1:]


def test_an_over_indented_quote_is_found_and_nested_replacement_lines_keep_their_relative_indent():
    source = "def f():\n    x = 1\n    y = 2\n    return x + y\n"
    edit = Edit("        x = 1\n        y = 2", "x = 3\nif x:\n    y = 4")
    assert apply_edits(source, [edit]) == "def f():\n    x = 3\n    if x:\n        y = 4\n    return x + y\n"


def test_no_edits_is_rejected():
    assert "no edits were given" in rejection(TRAIN, [])


def test_an_empty_old_string_is_rejected():
    message = rejection(TRAIN, [Edit("", "DEPTH = 4\n")])
    assert message.startswith("edit 1 of 1: old_string is empty")


def test_identical_old_and_new_strings_are_rejected():
    message = rejection(TRAIN, [Edit(DEPTH_LINE, DEPTH_LINE)])
    assert message == "edit 1 of 1: old_string and new_string are identical, so it changes nothing"


def test_a_non_unique_match_lists_the_lines_where_it_matches():
    needle = "super().__init__()"
    where = [number for number, line in enumerate(TRAIN_LINES, start=1) if needle in line]
    assert len(where) > 1
    message = rejection(TRAIN, [Edit(needle, "super().__init__()  # base")])
    assert f"matches {len(where)} places (starting at lines {', '.join(map(str, where))})" in message
    assert "include more surrounding lines" in message


def test_overlapping_occurrences_count_as_more_than_one_match():
    message = rejection("x = 1\nx = 1\nx = 1\n", [Edit("x = 1\nx = 1\n", "y = 2\n")])
    assert "matches 2 places (starting at lines 1, 2)" in message


def test_a_non_unique_match_once_indentation_is_ignored_lists_its_lines():
    source = "def f():\n    x = 1\n    y = 2\n\n\nclass C:\n    def g(self):\n        x = 1\n        y = 2\n"
    message = rejection(source, [Edit("x = 1\ny = 2", "x = 0\ny = 0")])
    assert "matches 2 places once indentation is ignored (lines 2, 8)" in message


def test_a_typo_is_not_found_and_the_most_similar_real_line_is_shown_numbered():
    real = "WEIGHT_DECAY = 0.2         # cautious, decays linearly to 0 over the budget"
    typo = "WEIGHT_DECAY = 0.2         # cautious, decays linearly to zero over the budget"
    number = line_number(real)

    message = rejection(TRAIN, [Edit(typo, "WEIGHT_DECAY = 0.1")])

    assert message.startswith("edit 1 of 1: old_string was not found in train.py")
    assert f"are {number}-{number}; copy them exactly" in message
    assert message.endswith(f"{number:4d}| {real}")


def test_an_edit_to_prepare_py_is_rejected():
    message = rejection(TRAIN, [Edit("EVAL_TOKENS", "EVAL_TOKENS // 2", path="prepare.py")])
    assert message.startswith("edit 1 of 1 targets 'prepare.py': only train.py may be edited")


def test_a_result_that_does_not_parse_is_rejected_with_its_line():
    number = line_number("def norm(x):")
    message = rejection(TRAIN, [Edit("def norm(x):", "def norm(x)")])
    assert message.startswith(f"after the edits train.py is not valid Python: line {number}:")
    assert f"{number:4d}| def norm(x)\n" in message


def test_edits_that_cancel_out_are_rejected():
    edits = [Edit("DEPTH = 8 ", "DEPTH = 9 "), Edit("DEPTH = 9 ", "DEPTH = 8 ")]
    assert "the edits leave train.py unchanged" in rejection(TRAIN, edits)


def test_a_failing_second_edit_rejects_the_whole_set_and_names_itself():
    good = Edit("DEPTH = 8 ", "DEPTH = 12")
    bad = Edit(DEPTH_LINE, "DEPTH = 4")

    message = rejection(TRAIN, [good, bad])

    assert message.startswith("edit 2 of 2: old_string was not found")
    assert f"{line_number(DEPTH_LINE):4d}| DEPTH = 12" in message
