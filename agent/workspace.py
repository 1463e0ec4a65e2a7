"""A run's workspace: its own git repository on branch autoresearch/<tag>.

The tracked tree is exactly train.py, prepare.py and track.json. The branch head is always
the best commit: a kept experiment advances it, anything else is reset away. Everything the
loop writes (ledger, logs, transcripts, run directories) is untracked and ignored.
"""

from __future__ import annotations

import configparser
import difflib
import functools
import hashlib
import io
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import git
from gitdb.base import IStream

from trainer.files.atomic import write_text_atomic
from trainer.files.locks import held
from trainer.prepare import PrepareError
from trainer.runs.run_id import RunId, RunPaths
from trainer.runs.training_run import FROZEN, TRACKED
from trainer.sandbox.untrusted import runs_root
from trainer.tracks.hyperparameters import train_source_for_track
from trainer.tracks.profiles import Profile
from trainer.tracks.spec import FrozenTrack, TrackSpec

PROJECT = Path(__file__).resolve().parent.parent
TRAINER_DIR = PROJECT / "trainer"
UNTRACKED = ("results.tsv", "experiments.jsonl", "logs/", "transcripts/", "runs/", "current.json", "inflight/",
             ".lock", "run.json", "optuna.journal", "optuna.journal.lock", "report/", "checkpoints/",
             "confirmation.json", "experiments.quarantine.jsonl", "proposal_failures.jsonl", "progress.json",
             ".progress.json.*", "mlflow.json", ".mlflow.json.*", "notes.md",
             "notes.md.lock", "calibration.json")  # .*: their atomic writes' temporary files
TAG_CHARS = re.compile(r"^[A-Za-z0-9._-]*$")
# Every git call ignores what could make git execute something a run planted in .git or elsewhere: hooks,
# an fsmonitor, system and global config, attributes files (filters); diffs skip external and textconv drivers.
GIT_OPTIONS = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "core.attributesFile=/dev/null",
               "core.sshCommand=false", "core.pager=cat", "core.editor=false")
GIT_ENVIRONMENT = dict(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_ATTR_NOSYSTEM="1",
                       GIT_TERMINAL_PROMPT="0")
# What the workspace's own .git/config may hold (git init and create() write these); anything else is refused.
GIT_CONFIG_ALLOWED = {"core": {"repositoryformatversion", "filemode", "bare", "logallrefupdates", "ignorecase",
                               "precomposeunicode", "symlinks"}, "user": {"name", "email"}}


def tag_problem(tag: str) -> str | None:
    """Why a tag cannot be one (None where it can): a directory under the workspace root and the last part of the
    branch autoresearch/<tag>, it must be one plain directory name that `git check-ref-format` accepts there."""
    if not tag or len(tag) > 64:
        return "must be 1 to 64 characters long"
    if "/" in tag or "\\" in tag or tag in (".", ".."):
        return "names a path, not a single workspace directory"
    if not TAG_CHARS.match(tag):
        return "has a character other than letters, digits, '.', '_' or '-'"
    if not tag[0].isalnum():
        return "does not start with a letter or a digit"
    if ".." in tag or tag.endswith((".", ".lock")):
        return "is not a valid git branch name (no '..', no trailing '.' or '.lock')"
    return None


class WorkspaceError(Exception):
    """A workspace that cannot be created, opened or used; the message says what to do."""


class NoWorkspace(WorkspaceError):
    """No workspace has the tag (yet)."""


def default_root() -> Path:
    """$AUTORESEARCH_WORKSPACES, else workspace/ in this checkout: the same from any directory."""
    return Path(os.environ.get("AUTORESEARCH_WORKSPACES") or PROJECT / "workspace").expanduser().resolve()


def safe_repo(directory: Path) -> git.Repo:
    """The workspace's repository, every git call made with GIT_OPTIONS and GIT_ENVIRONMENT, after checking
    that its .git/config holds only what a workspace writes (a planted filter or alias is refused)."""
    config = directory / ".git" / "config"
    if config.is_file():
        parser = configparser.RawConfigParser(strict=False)
        try:
            parser.read_string(config.read_text(errors="replace"))
            planted = [f"{section}.{key}" for section in parser.sections() for key in parser[section]
                       if key not in GIT_CONFIG_ALLOWED.get(section, ())]
        except configparser.Error as err:
            planted = [f"unreadable ({str(err).splitlines()[0]})"]
        if planted:
            raise WorkspaceError(f"{config} holds settings a workspace never writes: {', '.join(planted[:5])}. "
                                 "Something other than autoresearch changed it; remove those lines, then resume")
    repo = git.Repo(directory)
    repo.git.update_environment(**GIT_ENVIRONMENT)
    repo.git.set_persistent_git_options(c=list(GIT_OPTIONS))
    return repo


class Workspace:
    def __init__(self, directory: Path):
        self.dir = directory
        self.tag = directory.name
        self._per_thread = threading.local()
        self._per_thread.repo = safe_repo(directory)
        self.branch = f"autoresearch/{self.settings['tag']}"  # the tag it was created with, even if moved

    @property
    def repo(self) -> git.Repo:
        """The repository, one object per thread: GitPython's readers are not thread-safe, so the threads of a
        loop never share one (they take turns to write, under the loop's lock)."""
        if not hasattr(self._per_thread, "repo"):
            self._per_thread.repo = safe_repo(self.dir)
        return self._per_thread.repo

    @classmethod
    def create(cls, tag: str, track_spec: dict, program: Path, root: Path | None = None,
               profile: Profile | None = None, baseline: tuple[str, str] | None = None,
               settings: dict | None = None, prepare_source: str | None = None) -> Workspace:
        """The workspace of a new tag: train.py for the track (and the profile's hardware values, if given), or
        baseline's (train.py source, commit message) where given; settings: more keys for run.json;
        prepare_source: its frozen prepare.py where not the project's (the GPU check's shortened budget)."""
        if problem := tag_problem(tag):
            raise WorkspaceError(f"tag {tag!r} {problem}: use letters, digits, '.', '_' or '-' (max 64)")
        directory = (root or default_root()) / tag
        if directory.exists():
            raise WorkspaceError(f"workspace {directory} already exists: `autoresearch run --tag {tag}` resumes "
                                 "it, or choose another tag")
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = directory.with_name(f".creating-{tag}-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            staging.mkdir()
            git.Repo.init(staging, initial_branch=f"autoresearch/{tag}")
            repo = safe_repo(staging)
            with repo.config_writer() as config:
                config.set_value("user", "name", "autoresearch")
                config.set_value("user", "email", "autoresearch@localhost")
            (staging / ".git" / "info").mkdir(parents=True, exist_ok=True)
            (staging / ".git" / "info" / "exclude").write_text("\n".join(UNTRACKED) + "\n")
            track = track_spec["track"]
            source, message = baseline or (
                train_source_for_track((TRAINER_DIR / "train.py").read_text(), track,
                                       profile.hyperparameters if profile else None),
                f"baseline: train.py for track {track}")
            (staging / "train.py").write_text(source)
            prepare = (TRAINER_DIR / "prepare.py").read_text() if prepare_source is None else prepare_source
            (staging / "prepare.py").write_text(prepare)
            (staging / "track.json").write_text(json.dumps(track_spec, indent=2, sort_keys=True) + "\n")
            repo.index.add(list(TRACKED))
            repo.index.commit(message, skip_hooks=True)
            (staging / "run.json").write_text(json.dumps({
                "tag": tag, "track": track, "fingerprint": track_spec["fingerprint"],
                "program": str(program), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                **({"profile": profile.model_dump()} if profile else {}), **(settings or {})}, indent=2) + "\n")
            os.replace(staging, directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return cls(directory)

    @classmethod
    def open(cls, tag: str, root: Path | None = None) -> Workspace:
        directory = (root or default_root()) / tag
        if not (directory / ".git").is_dir() or not (directory / "run.json").exists():
            tags = [d.name for d in directory.parent.iterdir() if (d / "run.json").is_file()] \
                if directory.parent.is_dir() else []
            close = difflib.get_close_matches(tag, tags, n=1)
            raise NoWorkspace(f"no workspace for tag {tag!r} in {directory.parent}"
                                 + (f" (did you mean {close[0]}?)" if close else "")
                                 + f": start one with `autoresearch run --tag {tag}` or create it with "
                                   f"`autoresearch init --tag {tag}`")
        exclude = directory / ".git" / "info" / "exclude"
        if exclude.read_text() != "\n".join(UNTRACKED) + "\n":  # a workspace made by an older version
            write_text_atomic(exclude, "\n".join(UNTRACKED) + "\n")
        workspace = cls(directory)
        try:
            workspace.track  # noqa: B018 -- refused here, in one line, rather than wherever it is first read
        except PrepareError as err:
            raise WorkspaceError(str(err)) from None
        return workspace

    @property
    def settings(self) -> dict:
        return json.loads((self.dir / "run.json").read_text())

    def update_settings(self, **values) -> None:
        """run.json with these keys set, written whole."""
        write_text_atomic(self.dir / "run.json", json.dumps(dict(self.settings, **values), indent=2) + "\n")

    def follow_program(self, program: Path) -> None:
        """The tag follows this research program from its next experiment on (run.json names it)."""
        self.update_settings(program=str(program.resolve()))

    @functools.cached_property
    def track(self) -> FrozenTrack:
        return TrackSpec.frozen(self.file_at("track.json", self.root_commit()), f"{self.dir}'s track.json")

    def head(self) -> str:
        return self.repo.head.commit.hexsha

    def root_commit(self) -> str:
        return next(self.repo.iter_commits(self.branch, max_parents=0)).hexsha

    def file_at(self, path: str, commit: str | None = None) -> str:
        return self.repo.commit(commit or self.head()).tree[path].data_stream.read().decode("utf-8")

    def frozen_hashes(self) -> dict[str, str]:
        root = self.root_commit()
        return {path: hashlib.sha256(self.file_at(path, root).encode("utf-8")).hexdigest() for path in FROZEN}

    @property
    def runs_dir(self) -> Path:
        """Where this workspace's runs get their directories: outside it, so that a run cannot reach it."""
        return runs_root() / f"{self.tag}-{hashlib.sha256(str(self.dir).encode()).hexdigest()[:12]}"

    def paths(self, run: RunId) -> RunPaths:
        return RunPaths.of(self.dir, self.runs_dir, run)

    def is_clean(self) -> bool:
        return not self.repo.is_dirty(untracked_files=True)

    def commit_train(self, source: str, message: str, parent: str | None = None) -> str:
        """A commit of train.py = source on parent (default: the head) that moves nothing: not the branch, not
        the index, not the working tree, so that several experiments can be committed while the head stays the
        best. advance_to moves the branch onto one of them."""
        parent_commit = self.repo.commit(parent or self.head())
        data = source.encode("utf-8")
        blob = self.repo.odb.store(IStream("blob", len(data), io.BytesIO(data)))
        index = git.IndexFile.from_tree(self.repo, parent_commit)  # a private index: the workspace's is untouched
        index.add([git.BaseIndexEntry((0o100644, blob.binsha, 0, "train.py"))], write=False)
        return git.Commit.create_from_tree(self.repo, index.write_tree(), message, parent_commits=[parent_commit],
                                           head=False).hexsha

    def advance_to(self, commit: str) -> None:
        """The branch moves forward to a kept commit made on the current head (directly, or through the
        commit of a crash it fixed); the tree follows."""
        if not self.repo.is_ancestor(self.head(), commit) or commit == self.head():
            raise WorkspaceError(f"commit {commit[:7]} was not made on the best commit {self.head()[:7]}; only "
                                 "a commit made on the best can become the best")
        self.reset_to(commit)

    def reset_to(self, commit: str) -> None:
        self.repo.git.reset("--hard", commit)
        self.repo.git.clean("-fd")

    def diff(self, parent: str, commit: str) -> str:
        return self.repo.git.diff("--no-ext-diff", "--no-textconv", parent, commit, "--", "train.py")

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Held for the life of a loop; a second loop on the same tag is refused."""
        with ExitStack() as stack:
            try:
                handle = stack.enter_context(held(self.dir / ".lock", wait=False))
            except BlockingIOError:
                holder = (self.dir / ".lock").read_text().strip() or "another process"
                raise WorkspaceError(f"workspace {self.tag} is in use by {holder}: one loop per tag; stop it first "
                                     "or use another tag") from None
            handle.truncate(0)
            handle.write(f"pid {os.getpid()}\n")
            handle.flush()
            yield
