"""A night of the reference autoresearch loop (github.com/karpathy/autoresearch) or one of its forks, read from
a checkout.

What the reference leaves behind, as its program.md, prepare.py and analysis.ipynb describe it (read 2026-12-05):
a branch autoresearch/<tag> with one commit per kept experiment (each experiment's train.py change is
committed, and a discard or crash is `git reset` away, so its commit is usually unreachable but may still
exist as an object), and an untracked results.tsv (agent/importing/reference_results.py). Its first row is the
baseline, whose commit the reference's own published night writes as the word `baseline`: the branch's starting
point, which git knows. What a user has is usually a `git clone` of someone's repository: the night's branch
is then remote-only (origin/...), and results.tsv is whatever was committed on that branch.

Everything here only reads: the checkout's prepare.py is parsed, never executed, and git runs with the
workspace's hardened options (no hooks, filters or external diff drivers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import git

from agent.importing.reference_constants import MAX_SOURCE_BYTES, Constant, read_constants
from agent.importing.reference_results import BASELINE_COMMIT, MAX_BYTES, ReferenceRow, ResultsProblems, read_results
from agent.untrusted import NotPlainFile, clip, plain_file
from agent.workspace import GIT_ENVIRONMENT, GIT_OPTIONS

RESULTS = "results.tsv"
BRANCH_PREFIX = "autoresearch/"
UPSTREAMS = ("origin/HEAD", "master", "main", "origin/master", "origin/main")
MAX_DIFF_CHARS = 200_000


class ReferenceImportError(Exception):
    """A checkout that cannot be imported; the message names what is wrong and what to do. Nothing was written."""


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
    branch: str                            # as git names it: autoresearch/mar8, or origin/exp/H100/mar8
    results_from: str                      # where results.tsv was read: the work tree, or the branch
    constants: dict[str, Constant]         # by TRACKS key
    rows: list[ReferenceRow]
    commits: dict[str, ReferenceCommit]    # row commit as written -> the commit, for those the checkout holds
    remote: bool                           # the branch is a remote-tracking one (a clone's origin/...)
    resolved_baseline: str | None          # the commit git gave for a first row that says `baseline`
    shallow: bool                          # a shallow clone: commits older than its depth are missing

    @property
    def tag(self) -> str:
        """The default tag: autoresearch/<tag>'s tag, else the checkout's folder and the branch."""
        name = self.branch.split("/", 1)[1] if self.remote else self.branch
        name = name.removeprefix(BRANCH_PREFIX) if name.startswith(BRANCH_PREFIX) else f"{self.path.name}-{name}"
        return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._")[:64] or "imported"

    def baseline(self) -> ReferenceCommit | None:
        return self.commits.get(self.rows[0].commit)


def read_night(path: Path, branch: str | None = None) -> ReferenceNight:
    repo = open_checkout(path)
    chosen = choose_branch(repo, branch)
    text, results_from = results_text(repo, path, chosen)
    try:
        rows, problems = read_results(text, results_from), []
    except ResultsProblems as err:
        rows, problems = [], [str(err)]
    constants, constant_problems = read_constants(prepare_source(repo, chosen), f"prepare.py on {chosen}")
    if problems := problems + constant_problems:
        raise ReferenceImportError("; ".join(problems))
    commits = {row.commit: found for row in rows if (found := find_commit(repo, row.commit)) is not None}
    resolved = resolve_baseline(repo, chosen, rows, commits) if rows[0].commit == BASELINE_COMMIT else None
    if resolved is not None and (found := find_commit(repo, resolved)) is not None:
        commits[BASELINE_COMMIT] = found
    off_branch(repo, chosen, rows, commits, results_from)
    return ReferenceNight(path.resolve(), chosen, results_from, constants, rows, commits,
                          chosen not in branch_names(repo)[0], resolved, is_shallow(repo))


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


def branch_names(repo: git.Repo) -> tuple[list[str], list[str]]:
    local = [head.name for head in repo.heads]
    remote = [ref.name for ref in repo.references
              if isinstance(ref, git.RemoteReference) and not ref.name.endswith("/HEAD")]
    return local, remote


def choose_branch(repo: git.Repo, branch: str | None) -> str:
    """The named branch (with or without autoresearch/, local or on a remote), else the checked-out autoresearch/
    branch, else the only autoresearch/ branch, local or remote."""
    local, remote = branch_names(repo)
    remotes = [r.name for r in repo.remotes]
    if branch is not None:
        for candidate in (branch, BRANCH_PREFIX + branch):
            if candidate in local or candidate in remote:
                return candidate
            if found := [f"{name}/{candidate}" for name in remotes if f"{name}/{candidate}" in remote]:
                return found[0]
        raise ReferenceImportError(f"{repo.working_dir} has no branch {branch!r}; its branches are "
                                   f"{listed(local, remote)}")
    if not repo.head.is_detached and repo.active_branch.name.startswith(BRANCH_PREFIX):
        return repo.active_branch.name
    ours = [name for name in local if name.startswith(BRANCH_PREFIX)]
    ours += [name for name in remote if name.split("/", 1)[1].startswith(BRANCH_PREFIX)
             and name.split("/", 1)[1] not in local]
    if len(ours) == 1:
        return ours[0]
    raise ReferenceImportError(f"{repo.working_dir} has {len(ours) or 'no'} {BRANCH_PREFIX}<tag> branches"
                               + (f" ({', '.join(ours)})" if ours else f"; its branches are {listed(local, remote)}")
                               + ": name the night's branch with --branch (a remote one as it is, e.g. "
                               "--branch origin/autoresearch/mar8)")


def listed(local: list[str], remote: list[str]) -> str:
    names = local + [f"{name} (remote)" for name in remote]
    return ", ".join(names[:30]) + (f" and {len(names) - 30} more" if len(names) > 30 else "") if names else "none"


def results_text(repo: git.Repo, path: Path, branch: str) -> tuple[str, str]:
    """results.tsv as the night left it: the work tree's when the work tree is the branch (the reference leaves
    it untracked there), else the one committed on the branch, else the work tree's (its rows are then checked
    against the branch's history)."""
    tip = repo.commit(branch)
    work_tree = path / RESULTS
    committed = blob(tip, RESULTS)
    if work_tree.exists() or work_tree.is_symlink():
        if committed is None or repo.head.is_valid() and repo.head.commit == tip:
            return results_file(work_tree), str(work_tree)
    if committed is not None:
        if committed.size > MAX_BYTES:
            raise ReferenceImportError(f"{RESULTS} on {branch} is {committed.size:,} bytes, not a results.tsv")
        return committed.data_stream.read().decode("utf-8", errors="replace"), f"{RESULTS} on {branch}"
    raise ReferenceImportError(f"no {RESULTS} in {path}, nor committed on {branch}: the reference loop writes it "
                               "in the checkout (untracked); copy the night's results.tsv there, then import again")


def results_file(path: Path) -> str:
    """The work tree's results.tsv: a plain file of the checkout itself, never a link out of it, a device or a
    pipe, and of a results.tsv's size."""
    try:
        return plain_file(path, MAX_BYTES).decode("utf-8", errors="replace")
    except NotPlainFile as err:
        raise ReferenceImportError(f"{path.parent}: {err}; give the night's results.tsv as a plain file in the "
                                   "checkout") from None


def blob(commit: git.Commit, name: str) -> git.Blob | None:
    try:
        return commit.tree[name]
    except KeyError:
        return None


def prepare_source(repo: git.Repo, branch: str) -> str:
    if (found := blob(repo.commit(branch), "prepare.py")) is None:
        raise ReferenceImportError(f"branch {branch} of {repo.working_dir} has no prepare.py: without it the "
                                   "night's constants (sequence length, budget, eval tokens, vocabulary) are "
                                   "unknown")
    if found.size > MAX_SOURCE_BYTES:
        raise ReferenceImportError(f"prepare.py on {branch} is {found.size:,} bytes, not the reference's prepare.py")
    return found.data_stream.read().decode("utf-8", errors="replace")


def resolve_baseline(repo: git.Repo, branch: str, rows: list[ReferenceRow],
                     commits: dict[str, ReferenceCommit]) -> str | None:
    """The commit of a first row that says `baseline`: the parent of the first kept commit on the branch, else
    where the branch left its upstream; None where git knows neither."""
    for row in rows[1:]:
        found = commits.get(row.commit)
        if row.status == "keep" and found is not None and found.parent and on_history(repo, found.sha, branch):
            return found.parent
    for upstream in UPSTREAMS:
        try:
            if repo.commit(upstream).hexsha != repo.commit(branch).hexsha:
                return repo.git.merge_base(upstream, branch)
        except (git.GitCommandError, ValueError, git.BadName):
            continue
    return None


def on_history(repo: git.Repo, sha: str, branch: str) -> bool:
    try:
        return repo.is_ancestor(sha, branch)
    except git.GitCommandError:
        return False


def off_branch(repo: git.Repo, branch: str, rows: list[ReferenceRow], commits: dict[str, ReferenceCommit],
               results_from: str) -> None:
    """Refuses a results.tsv whose rows name commits that grew from no point of the branch's history (the rows of
    another branch), naming every such line."""
    history = set(repo.git.rev_list(branch).split())
    strangers = [row for row in rows if (found := commits.get(row.commit)) is not None
                 and found.sha not in history and found.parent not in history]
    if strangers:
        lines = ", ".join(f"{row.line} ({row.commit})" for row in strangers[:20])
        raise ReferenceImportError(f"{results_from}: the commits of line(s) {lines} are not on {branch}'s history, "
                                   "so these rows belong to another branch: name that branch with --branch, or "
                                   "import a results.tsv of this one")


def is_shallow(repo: git.Repo) -> bool:
    try:
        return repo.git.rev_parse("--is-shallow-repository") == "true"
    except git.GitCommandError:
        return False


def find_commit(repo: git.Repo, commit: str) -> ReferenceCommit | None:
    """The commit results.tsv names, reachable or not, with its train.py; None where the checkout lacks either."""
    if commit == BASELINE_COMMIT:
        return None
    try:
        sha = repo.git.rev_parse("--verify", "--quiet", f"{commit}^{{commit}}")
        found = repo.commit(sha)
        train = found.tree["train.py"]
        if train.type != "blob" or train.size > MAX_SOURCE_BYTES:
            return None
        source = train.data_stream.read().decode("utf-8")
    except (git.GitCommandError, ValueError, KeyError, UnicodeDecodeError):
        return None
    parent = found.parents[0].hexsha if found.parents else None
    try:
        diff = clip(repo.git.diff("--no-ext-diff", "--no-textconv", parent, sha, "--", "train.py"), MAX_DIFF_CHARS
                    ) if parent else ""
    except git.GitCommandError:  # the parent is past a shallow clone's depth
        parent, diff = None, ""
    return ReferenceCommit(sha, parent, source, diff, float(found.committed_date))
