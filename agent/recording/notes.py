"""The research notes of a workspace: notes.md, which the model rewrites through write_notes and the
user appends to through `steer --note`.

notes.md sits on the ledger side of the workspace (ignored by git, like the ledger), so that resetting
a discarded experiment never touches it and no run ever receives it (runs get train.py, prepare.py and
track.json only). With every keep its text is recorded against the kept commit as a git note under
refs/notes/research, so `git notes --ref=research show <commit>` gives the notes as they were then.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel

from trainer.files.atomic import write_text_atomic
from trainer.files.locks import held

NOTES_FILE = "notes.md"
NOTES_LOCK = "notes.md.lock"
NOTES_LIMIT = 8192          # bytes of UTF-8
NOTES_NEARLY_FULL = 6144    # from here on the model is asked to rewrite them shorter
USER_NOTE_LIMIT = 1000      # characters of one note given with `steer --note`
NOTES_REF = "refs/notes/research"


class NotesFull(ValueError):
    """The notes would grow past NOTES_LIMIT; the message says by how much and what to do."""


class NotesChanged(ValueError):
    """Someone wrote the notes after the writer read them; the message holds them as they are now."""

    def __init__(self, current: str):
        super().__init__(
            "notes.md changed since you read it (another conversation or the user wrote it); nothing was written. "
            "It now reads:\n" + (current or "(empty)") + "\nCall write_notes again with the complete text, keeping "
            "what is there that still holds")
        self.current = current


class Notes(BaseModel):
    text: str
    size: int   # bytes

    @property
    def nearly_full(self) -> bool:
        return self.size >= NOTES_NEARLY_FULL


def notes_path(workspace_dir: Path) -> Path:
    return workspace_dir / NOTES_FILE


def read_notes(workspace_dir: Path) -> Notes:
    try:
        text = notes_path(workspace_dir).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    return Notes(text=text, size=len(text.encode("utf-8")))


def write_notes(workspace_dir: Path, text: str, read: str | None = None) -> Notes:
    """Replaces the notes; refused (nothing written) past NOTES_LIMIT, and, when the writer says what it read,
    if they are no longer that (several conversations write them: none may overwrite what it never saw)."""
    size = len(text.encode("utf-8"))
    if size > NOTES_LIMIT:
        raise NotesFull(f"the notes would be {size} bytes, over the limit of {NOTES_LIMIT}; nothing was written. "
                        "Rewrite them shorter: merge related points, drop what is settled or already in the "
                        "history, and call write_notes again with the whole shorter text")
    with held(workspace_dir / NOTES_LOCK):
        current = read_notes(workspace_dir).text
        if read is not None and current != read:
            raise NotesChanged(current)
        write_text_atomic(notes_path(workspace_dir), text)
    return Notes(text=text, size=size)


def append_user_note(workspace_dir: Path, note: str) -> Notes:
    note = " ".join(note.split())
    if not note:
        raise NotesFull("the note is empty: give the text to add, e.g. --note 'try mixture of depths next'")
    if len(note) > USER_NOTE_LIMIT:
        raise NotesFull(f"the note is {len(note)} characters; a note may have at most {USER_NOTE_LIMIT}: "
                        "shorten it and give it again")
    with held(workspace_dir / NOTES_LOCK):
        current = read_notes(workspace_dir).text
        entry = f"- (from the user, {time.strftime('%Y-%m-%d %H:%M')}) {note}\n"
        text = current + ("" if not current or current.endswith("\n") else "\n") + entry
        size = len(text.encode("utf-8"))
        if size > NOTES_LIMIT:
            raise NotesFull(f"notes.md is full ({len(current.encode('utf-8'))} of {NOTES_LIMIT} bytes) and the note "
                            f"would take it to {size}; nothing was written. The model is asked to shorten the notes "
                            f"when they are this full; give the note again after the next experiment, or edit "
                            f"{notes_path(workspace_dir)} by hand")
        write_text_atomic(notes_path(workspace_dir), text)
    return Notes(text=text, size=size)


def record_with_keep(repo, commit: str, workspace_dir: Path) -> None:
    """The notes as they are now, attached to a kept commit (git notes, outside the tracked tree)."""
    if text := read_notes(workspace_dir).text:
        repo.git.notes(f"--ref={NOTES_REF}", "add", "-f", "-m", text, commit)

