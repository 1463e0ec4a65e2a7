"""A night of the reference autoresearch loop (github.com/karpathy/autoresearch), read from its checkout.

What the reference leaves behind, as its program.md, prepare.py and analysis.ipynb describe it (read 2026-12-05):
a branch autoresearch/<tag> with one commit per kept experiment (each experiment's train.py change is
committed, and a discard or crash is `git reset` away, so its commit is usually unreachable but may still
exist as an object), and an untracked results.tsv with a header and five tab-separated columns
`commit val_bpb memory_gb status description` (commit: 7 hex digits; status keep, discard or crash; a crash
has val_bpb 0.000000 and memory_gb 0.0). Its first row is the baseline. prepare.py fixes MAX_SEQ_LEN = 2048,
TIME_BUDGET = 300 (wall-clock seconds of training), EVAL_TOKENS = 40 * 524288 and VOCAB_SIZE = 8192.

Everything here only reads: the checkout's prepare.py is parsed, never executed, and git runs with the
workspace's hardened options (no hooks, filters or external diff drivers).
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import git
from pydantic import BaseModel

from agent.workspace import GIT_ENVIRONMENT, GIT_OPTIONS

RESULTS = "results.tsv"
COLUMNS = ("commit", "val_bpb", "memory_gb", "status", "description")
STATUSES = ("keep", "discard", "crash")
BRANCH_PREFIX = "autoresearch/"
# prepare.py's name for each constant -> the key of trainer/prepare.py's TRACKS
CONSTANTS = {"MAX_SEQ_LEN": "max_seq_len", "TIME_BUDGET": "time_budget", "EVAL_TOKENS": "eval_tokens",
             "VOCAB_SIZE": "vocab_size"}
HEX = re.compile(r"^[0-9a-fA-F]{4,40}$")
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
             ast.Div: operator.truediv, ast.Pow: operator.pow}


class ReferenceImportError(Exception):
    """A checkout that cannot be imported; the message names what is wrong and what to do. Nothing was written."""


class ReferenceRow(BaseModel):
    """One row of the reference's results.tsv."""
    line: int                       # 1-based line number in results.tsv (the header is line 1)
    commit: str
    val_bpb: float
    memory_gb: float
    status: Literal["keep", "discard", "crash"]
    description: str


@dataclass(frozen=True)
class ReferenceCommit:
    """A commit of results.tsv as the checkout holds it."""
    sha: str
    parent: str | None       # its first parent, None for a root commit
    train_source: str        # its train.py
    diff: str                # `git diff parent commit -- train.py` ("" for a root commit)
    committed: float         # when it was committed (the reference commits an experiment as it starts it)


@dataclass(frozen=True)
class ReferenceNight:
    path: Path
    branch: str
    constants: dict[str, int | float]      # by TRACKS key
    rows: list[ReferenceRow]
    commits: dict[str, ReferenceCommit]    # row commit as written -> the commit, for those the checkout holds

    @property
    def tag(self) -> str:
        return self.branch.removeprefix(BRANCH_PREFIX)


def read_night(path: Path, branch: str | None = None) -> ReferenceNight:
    repo = open_checkout(path)
    chosen = choose_branch(repo, branch)
    rows = read_results(path / RESULTS)
    constants = read_constants(repo, chosen)
    commits = {row.commit: found for row in rows if (found := find_commit(repo, row.commit)) is not None}
    return ReferenceNight(path.resolve(), chosen, constants, rows, commits)


def open_checkout(path: Path) -> git.Repo:
    if not path.is_dir():
        raise ReferenceImportError(f"{path} is not a directory: give the checkout the reference loop ran in (the "
                                   "folder holding its train.py, prepare.py and results.tsv)")
    try:
        repo = git.Repo(path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise ReferenceImportError(f"{path} is not a git checkout: give the folder the reference loop ran in "
                                   "(its .git holds the kept commits)") from None
    repo.git.update_environment(**GIT_ENVIRONMENT)
    repo.git.set_persistent_git_options(c=list(GIT_OPTIONS))
    return repo


def choose_branch(repo: git.Repo, branch: str | None) -> str:
    """The named branch (with or without autoresearch/), else the checked-out autoresearch/ branch, else the
    only one."""
    names = [head.name for head in repo.heads]
    ours = [name for name in names if name.startswith(BRANCH_PREFIX)]
    if branch is not None:
        for candidate in (branch, BRANCH_PREFIX + branch):
            if candidate in names:
                return candidate
        raise ReferenceImportError(f"{repo.working_dir} has no branch {branch!r}; its branches are "
                                   f"{', '.join(names) or 'none'}")
    if not repo.head.is_detached and repo.active_branch.name in ours:
        return repo.active_branch.name
    if len(ours) == 1:
        return ours[0]
    raise ReferenceImportError(f"{repo.working_dir} has {len(ours) or 'no'} {BRANCH_PREFIX}<tag> branches"
                               + (f" ({', '.join(ours)})" if ours else "")
                               + ": name the night's branch with --branch")


def read_results(path: Path) -> list[ReferenceRow]:
    if not path.is_file():
        raise ReferenceImportError(f"no {RESULTS} in {path.parent}: the reference loop writes it there (untracked); "
                                   "copy the night's results.tsv into the checkout, then import again")
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if not lines or tuple(cell.strip() for cell in lines[0].split("\t")) != COLUMNS:
        found = repr(lines[0][:120]) if lines else "an empty file"
        raise ReferenceImportError(f"{path} line 1 is not the reference header: expected the tab-separated "
                                   f"columns {' '.join(COLUMNS)}, found {found}")
    rows = [parse_row(path, number, text) for number, text in enumerate(lines[1:], 2) if text.strip()]
    if not rows:
        raise ReferenceImportError(f"{path} has no rows under its header: there is no night to import")
    if rows[0].status != "keep":
        raise ReferenceImportError(f"{path} line {rows[0].line}: the first row is the baseline and must be keep, "
                                   f"not {rows[0].status}")
    return rows


def parse_row(path: Path, number: int, text: str) -> ReferenceRow:
    cells = text.split("\t", len(COLUMNS) - 1)  # a tab in the description stays in it

    def bad(problem: str) -> ReferenceImportError:
        return ReferenceImportError(f"{path} line {number}: {problem}; fix that line (columns: "
                                    f"{' '.join(COLUMNS)}, tab-separated), then import again")

    if len(cells) < len(COLUMNS):
        raise bad(f"{len(cells)} column(s), expected {len(COLUMNS)} separated by tabs")
    commit, val_bpb, memory_gb, status, description = (cell.strip() for cell in cells)
    if not HEX.match(commit):
        raise bad(f"commit {commit[:60]!r} is not a hexadecimal commit id")
    numbers = {}
    for name, value in (("val_bpb", val_bpb), ("memory_gb", memory_gb)):
        try:
            numbers[name] = float(value)
        except ValueError:
            raise bad(f"{name} {value[:60]!r} is not a number") from None
        if not 0 <= numbers[name] < float("inf"):
            raise bad(f"{name} {value[:60]!r} is not a finite number >= 0")
    if status not in STATUSES:
        raise bad(f"status {status[:60]!r} is not one of {', '.join(STATUSES)}")
    return ReferenceRow(line=number, commit=commit.lower(), status=status, description=description, **numbers)


def read_constants(repo: git.Repo, branch: str) -> dict[str, int | float]:
    """The track constants of the branch's prepare.py, read from its source (never run)."""
    try:
        source = repo.commit(branch).tree["prepare.py"].data_stream.read().decode("utf-8")
    except KeyError:
        raise ReferenceImportError(f"branch {branch} of {repo.working_dir} has no prepare.py: without it the "
                                   "night's constants (sequence length, budget, eval tokens, vocabulary) are "
                                   "unknown") from None
    found: dict[str, int | float] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in CONSTANTS:
                try:
                    found[CONSTANTS[name]] = constant_value(node.value)
                except ValueError:
                    raise ReferenceImportError(f"prepare.py on {branch} sets {name} to an expression that is not a "
                                               "plain number; this import reads numbers and arithmetic only") from None
    missing = [name for name, key in CONSTANTS.items() if key not in found]
    if missing:
        raise ReferenceImportError(f"prepare.py on {branch} does not set {', '.join(missing)}: it is not the "
                                   "reference's prepare.py, so the night's track is unknown")
    return found


def constant_value(node: ast.expr) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -constant_value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](constant_value(node.left), constant_value(node.right))
    raise ValueError("not a number")


def find_commit(repo: git.Repo, commit: str) -> ReferenceCommit | None:
    """The commit results.tsv names, reachable or not, with its train.py; None where the checkout lacks either."""
    try:
        sha = repo.git.rev_parse("--verify", "--quiet", f"{commit}^{{commit}}")
        found = repo.commit(sha)
        source = found.tree["train.py"].data_stream.read().decode("utf-8")
    except (git.GitCommandError, ValueError, KeyError, UnicodeDecodeError):
        return None
    parent = found.parents[0].hexsha if found.parents else None
    diff = repo.git.diff("--no-ext-diff", "--no-textconv", parent, sha, "--", "train.py") if parent else ""
    return ReferenceCommit(sha, parent, source, diff, float(found.committed_date))
