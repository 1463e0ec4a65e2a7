"""The results.tsv of a reference night, read as the reference's analysis notebook reads it: by column name.

The notebook (analysis.ipynb of github.com/karpathy/autoresearch, read 2026-12-06) loads the file with
`pd.read_csv(sep="\\t")`, takes val_bpb and memory_gb by name with non-numbers as missing, and compares the
status upper-cased. Forks add columns (mfu, tok_per_sec, num_steps, hypotheses...) and statuses of their own;
a file saved by Excel or Notepad starts with a byte-order mark and ends its lines with CRLF. All of that is read
here: extra columns are kept by name, and a status this harness does not have is mapped onto one of its three
(STATUS_WORDS, else discard: the night did not call it a keep) and the mapping is reported.

Every problem of the file is collected, so that one refusal lists all of them, not one per try.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel

from agent.untrusted import bounded

REQUIRED = ("commit", "val_bpb", "status")
OPTIONAL = ("memory_gb", "description")
MAX_BYTES = 16 * 1024 * 1024       # no night writes more; a bigger file is not a results.tsv
MAX_ROWS = 10_000                  # a night is hundreds of experiments; each row costs a few git calls
SHOWN_PROBLEMS = 20
HEX = re.compile(r"^[0-9a-fA-F]{4,40}$")
BASELINE_COMMIT = "baseline"       # the reference's own published night names its first row's commit so
# status words forks write -> ours (a word not here is read as discard: the night did not call it a keep)
STATUS_WORDS = {"keep": "keep", "kept": "keep", "best": "keep", "baseline": "keep",
                "discard": "discard", "discarded": "discard", "revert": "discard", "reverted": "discard",
                "crash": "crash", "crashed": "crash", "error": "crash", "failed": "crash", "fail": "crash",
                "oom": "crash", "timeout": "crash"}


class ReferenceRow(BaseModel):
    line: int                       # 1-based line number in results.tsv (the header is line 1)
    commit: str                     # lower-case hex as written, or BASELINE_COMMIT
    val_bpb: float | None           # None for a crash (the reference writes 0.000000 there)
    memory_gb: float | None         # None where the night did not record it
    status: str                     # keep, discard or crash
    written_status: str             # the status as the night wrote it
    description: str
    extra: dict[str, str] = {}      # the columns beyond the reference's five, by name


class ResultsProblems(Exception):
    """The lines of results.tsv that cannot be read, each named; nothing was written."""

    def __init__(self, where: str, problems: list[str]):
        more = f"; and {len(problems) - SHOWN_PROBLEMS} more" if len(problems) > SHOWN_PROBLEMS else ""
        super().__init__(f"{where}: {'; '.join(problems[:SHOWN_PROBLEMS])}{more}. Fix those lines, then import again")


def read_results(text: str, where: str) -> list[ReferenceRow]:
    """The rows of a results.tsv's text; ResultsProblems naming every bad line."""
    lines = text.removeprefix("\ufeff").splitlines()
    names = [bounded(cell, 60) for cell in lines[0].split("\t")] if lines else []
    header = [name.lower() for name in names]
    if twice := sorted({name for name in header if header.count(name) > 1}):
        raise ResultsProblems(where, [f"line 1 names the column(s) {', '.join(twice)} more than once, so which one "
                                      "holds the numbers is unknown; keep one of each"])
    if len(lines) - 1 > MAX_ROWS:
        raise ResultsProblems(where, [f"{len(lines) - 1:,} rows, more than the {MAX_ROWS:,} a night holds; import "
                                      "a results.tsv of one night"])
    if missing := [name for name in REQUIRED if name not in header]:
        found = repr(lines[0][:120]) if lines else "an empty file"
        raise ResultsProblems(where, [f"line 1 has no {', '.join(missing)} column (found {found}); a night's "
                                      f"results.tsv has a tab-separated header naming at least "
                                      f"{', '.join(REQUIRED)}"])
    rows, problems = [], []
    for number, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        try:
            rows.append(parse_row(header, names, number, line))
        except ValueError as err:
            problems.append(f"line {number}: {err}")
    if not rows and not problems:
        problems.append("no rows under its header: there is no night to import")
    elif rows and rows[0].status != "keep" and not problems:
        problems.append(f"line {rows[0].line}: the first row is the baseline and must be keep, not "
                        f"{rows[0].written_status}")
    if problems:
        raise ResultsProblems(where, problems)
    return rows


def parse_row(header: list[str], names: list[str], number: int, line: str) -> ReferenceRow:
    cells = [cell.strip() for cell in line.split("\t")]
    if len(cells) > len(header) and header[-1] == "description":  # a tab inside the last column's text
        cells = cells[:len(header) - 1] + ["\t".join(cells[len(header) - 1:])]
    if len(cells) != len(header):
        raise ValueError(f"{len(cells)} column{'(s)' if len(cells) < len(header) else 's'} where the header has "
                         f"{len(header)}")
    cell = dict(zip(header, cells, strict=True))
    commit = cell["commit"].lower()
    if commit != BASELINE_COMMIT and not HEX.match(commit):
        raise ValueError(f"commit {bounded(cell['commit'], 60)!r} is not a hexadecimal commit id")
    written = cell["status"]
    mapped = STATUS_WORDS.get(written.lower())
    val_bpb = number_or_none(cell["val_bpb"], "val_bpb")
    if mapped == "crash" or (mapped is None and not val_bpb):
        status, val_bpb = "crash", None
    elif not val_bpb and mapped == "keep":
        raise ValueError(f"val_bpb {bounded(cell['val_bpb'], 60)!r} is not a positive number, and the row is a "
                         f"{bounded(written, 40)} (a keep needs its val_bpb)")
    else:
        status, val_bpb = mapped or "discard", val_bpb or None
    return ReferenceRow(line=number, commit=commit, val_bpb=val_bpb,
                        memory_gb=number_or_none(cell.get("memory_gb", ""), "memory_gb"), status=status,
                        written_status=bounded(written, 40), description=bounded(cell.get("description", "")),
                        extra={name: bounded(value, 200) for name, key, value in zip(names, header, cells, strict=True)
                               if key not in REQUIRED + OPTIONAL})


def number_or_none(text: str, name: str) -> float | None:
    """A finite number >= 0, None for an empty cell or a missing value (nan, -, n/a)."""
    try:
        value = float(text)
    except ValueError:
        return None
    if math.isnan(value):
        return None
    if not 0 <= value < math.inf:
        raise ValueError(f"{name} {text[:60]!r} is not a finite number >= 0")
    return value


def status_mapping(rows: list[ReferenceRow]) -> dict[str, str]:
    """Each status word the night wrote that is not ours -> what it was read as."""
    return {row.written_status: row.status for row in rows if row.written_status.lower() != row.status}
