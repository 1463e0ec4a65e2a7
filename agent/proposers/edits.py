"""Search/replace edits on train.py: strict matching, all or none, messages a model can act on.

Each edit's old_string must occur exactly once: first as written, then ignoring a uniform
indentation shift of the whole block (the replacement is re-indented to match). Never fuzzy.
Edits apply in order to a copy; the file changes only if every edit applies and the result
parses, and an edit set that changes nothing is refused.
"""

from __future__ import annotations

import difflib
import textwrap
from dataclasses import dataclass

from agent.llm.types import Usage
from trainer.files import parsing

EDITABLE_FILE = "train.py"


@dataclass(frozen=True)
class Edit:
    old_string: str
    new_string: str
    path: str = EDITABLE_FILE


class EditRejected(Exception):
    """An edit set that cannot be applied; the message says which edit, which rule, and where."""
    usage: Usage | None = None  # what the proposal it came with had spent (it counts towards the cost cap)


def apply_edits(source: str, edits: list[Edit]) -> str:
    if not edits:
        raise EditRejected("no edits were given: submit at least one {old_string, new_string} for train.py")
    result = source
    for number, edit in enumerate(edits, start=1):
        result = _apply_one(result, edit, number, len(edits))
    if result == source:
        raise EditRejected("the edits leave train.py unchanged: an experiment must change something")
    try:
        parsing.parse(result)
    except SyntaxError as err:
        raise EditRejected(f"after the edits train.py is not valid Python: line {err.lineno}: {err.msg}\n"
                           f"{_numbered(result, err.lineno or 1, 2)}") from None
    return result


def _apply_one(source: str, edit: Edit, number: int, total: int) -> str:
    label = f"edit {number} of {total}"
    if edit.path not in (EDITABLE_FILE, f"./{EDITABLE_FILE}"):
        raise EditRejected(f"{label} targets {edit.path!r}: only {EDITABLE_FILE} may be edited; prepare.py and "
                           "track.json are frozen")
    if not edit.old_string:
        raise EditRejected(f"{label}: old_string is empty; quote the exact lines of train.py to replace")
    if edit.old_string == edit.new_string:
        raise EditRejected(f"{label}: old_string and new_string are identical, so it changes nothing")
    lines = match_lines(source, edit.old_string)  # overlapping matches count: str.count would miss them
    if (count := len(lines)) == 1:
        return source.replace(edit.old_string, edit.new_string, 1)
    if count > 1:
        raise EditRejected(f"{label}: old_string matches {count} places (starting at lines "
                           f"{', '.join(map(str, lines))}); include more surrounding lines so it matches one")
    return _apply_reindented(source, edit, label)


def _apply_reindented(source: str, edit: Edit, label: str) -> str:
    lines = source.splitlines(keepends=True)
    wanted = textwrap.dedent(edit.old_string.strip("\n"))
    n = len(wanted.splitlines())
    matches = [i for i in range(len(lines) - n + 1)
               if textwrap.dedent("".join(lines[i:i + n])).strip("\n") == wanted]
    if len(matches) > 1:
        raise EditRejected(f"{label}: old_string matches {len(matches)} places once indentation is ignored "
                           f"(lines {', '.join(str(i + 1) for i in matches)}); include more surrounding lines")
    if not matches:
        raise EditRejected(f"{label}: old_string was not found in train.py (not even with other indentation). "
                           f"{_nearest(source, edit.old_string)}")
    start = matches[0]
    block = "".join(lines[start:start + n])
    indents = [line[:len(line) - len(line.lstrip())] for line in block.splitlines() if line.strip()]
    indent = min(indents, key=len) if indents else ""
    replacement = textwrap.indent(textwrap.dedent(edit.new_string.strip("\n")), indent)
    if block.endswith("\n") and not replacement.endswith("\n"):
        replacement += "\n"
    return "".join(lines[:start]) + replacement + "".join(lines[start + n:])


def match_lines(source: str, needle: str) -> list[int]:
    found, start = [], 0
    while (index := source.find(needle, start)) != -1:
        found.append(source.count("\n", 0, index) + 1)
        start = index + 1
    return found


def _nearest(source: str, needle: str) -> str:
    lines = source.splitlines()
    n = max(1, len(needle.strip("\n").splitlines()))
    target = needle.strip()
    ratios = [difflib.SequenceMatcher(None, "\n".join(lines[i:i + n]).strip(), target).ratio()
              for i in range(max(1, len(lines) - n + 1))]
    best = ratios.index(best_ratio := max(ratios))
    return (f"The most similar lines ({best_ratio:.0%} alike) are {best + 1}-{best + n}; copy them exactly:\n"
            + _numbered(source, best + 1, 0, best + n))


def _numbered(source: str, first: int, context: int, last: int | None = None) -> str:
    lines = source.splitlines()
    last = last if last is not None else first
    lo, hi = max(1, first - context), min(len(lines), last + context)
    return "\n".join(f"{i:4d}| {lines[i - 1]}" for i in range(lo, hi + 1))
