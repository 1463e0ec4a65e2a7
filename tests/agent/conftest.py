"""Workspaces on the prepared test track, in temporary directories."""

from pathlib import Path

import pytest

from agent.workspace import Workspace

PROGRAM = Path(__file__).resolve().parents[2] / "prompts" / "program.md"


@pytest.fixture
def workspace(test_track, tmp_path):
    return Workspace.create("t", test_track.spec, PROGRAM, root=tmp_path / "workspaces")
