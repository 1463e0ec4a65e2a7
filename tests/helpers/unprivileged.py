"""Starting a loop as an unprivileged user (uid 65534) from a test that runs as root."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

STRANGER = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def unprivileged_python(home: Path) -> str:
    """An interpreter with this environment's packages that uid 65534 can start processes with: this one where
    it can, else a virtual environment of links in home (a base interpreter under a private home directory is
    out of its reach)."""
    probe = subprocess.run([*STRANGER, "sh", "-c", '"$0" -c "import torch"', sys.executable], cwd="/")
    if probe.returncode == 0:
        return sys.executable
    venv = home / "venv"
    (venv / "bin").mkdir(parents=True)
    try:
        os.link(os.path.realpath(sys.executable), venv / "bin" / "python")
    except OSError as err:
        pytest.skip(f"uid 65534 cannot run {sys.executable}, nor a link to it ({err})")
    shutil.copy2(Path(sys.prefix) / "pyvenv.cfg", venv / "pyvenv.cfg")
    site = venv / Path(sysconfig.get_paths()["purelib"]).relative_to(sys.prefix)
    site.parent.mkdir(parents=True)
    site.symlink_to(sysconfig.get_paths()["purelib"])
    return str(venv / "bin" / "python")


def unreachable_by_others(*paths: Path) -> list[str]:
    """Directories above paths that other users cannot search (uid 65534 could not reach what lies below)."""
    return sorted({str(p) for path in paths for p in path.parents if not p.stat().st_mode & 0o001})
