"""An edited copy of train.py turned back into search/replace edits on the original: one edit per changed region,
its old_string widened by context lines until it occurs exactly once in the original, so the edits go through the
same validation as any proposal's."""

from __future__ import annotations

import difflib

from agent.proposers.edits import Edit, apply_edits, match_lines

Region = tuple[int, int, int, int]  # lines i1:i2 of the original became lines j1:j2 of the edited copy


def edits_between(original: str, edited: str) -> list[Edit]:
    """Edits that turn original into edited, in file order; [] when nothing changed."""
    if original == edited:
        return []
    old, new = original.splitlines(keepends=True), edited.splitlines(keepends=True)
    changed = [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in
               difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes() if tag != "equal"]
    regions = _widened(original, old, changed)
    edits = [Edit("".join(old[i1:i2]), "".join(new[j1:j2])) for i1, i2, j1, j2 in regions]
    if _applies(original, edits, edited):
        return edits
    # An earlier replacement repeats a later old_string: one edit over the whole changed span cannot be ambiguous.
    (i1, _, j1, _), (_, i2, _, j2) = regions[0], regions[-1]
    return [Edit("".join(old[i1:i2]), "".join(new[j1:j2]))]


def _widened(original: str, old: list[str], regions: list[Region]) -> list[Region]:
    """Each region grown by equal lines on both sides until its old text is unique and not blank; regions that
    come to touch are merged."""
    out: list[Region] = []
    for region in regions:
        region = _unique(original, old, region)
        while out and region[0] <= out[-1][1]:
            previous = out.pop()
            region = _unique(original, old, (previous[0], region[1], previous[2], region[3]))
        out.append(region)
    return out


def _unique(original: str, old: list[str], region: Region) -> Region:
    i1, i2, j1, j2 = region
    before = True  # grows by one line at a time, before and after in turn
    while True:
        text = "".join(old[i1:i2])
        if (text.strip() and len(match_lines(original, text)) == 1) or (i1 == 0 and i2 == len(old)):
            return i1, i2, j1, j2
        if (before or i2 == len(old)) and i1 > 0:  # an unchanged line belongs to old and new alike
            i1, j1 = i1 - 1, j1 - 1
        else:
            i2, j2 = i2 + 1, j2 + 1
        before = not before


def _applies(original: str, edits: list[Edit], edited: str) -> bool:
    try:
        return apply_edits(original, edits) == edited
    except Exception:  # noqa: BLE001 - any failure means: use the single span instead
        return False
