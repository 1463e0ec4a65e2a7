"""Whether a tag imported from a reference night may go on (agent/importing/reference_import.py decides it at
import and writes it to run.json), read without the importer's dependencies."""

from __future__ import annotations

from agent.workspace import Workspace


def cannot_continue(workspace: Workspace) -> str | None:
    """Why `run` must not go on with an imported tag, None where it may (or the tag was not imported)."""
    why = (workspace.settings.get("imported") or {}).get("cannot_continue")
    return (f"{workspace.tag} was imported from a reference night and cannot continue here: {why}. Its results stay "
            f"readable by `status` and `report`") if why else None
