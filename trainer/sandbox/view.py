"""What an untrusted process sees: an allowlist, for runs and model servers alike.

Under bubblewrap the root is empty and only these are mounted into it (docs/security.md, "Runs are strangers"):
the system's own trees read-only (SYSTEM_PATHS), the Python installation and its libraries, what the caller
shows read-only (a track's data, sealed weights) and writable (its own run directory), and private /tmp and
/dev/shm mounts that die with it. What the caller hides is covered by an empty mount even inside a tree it
shows (a track's val and holdout beside its training split).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trainer.prepare import cache_root
from trainer.sandbox.isolation import isolation, run_uid
from trainer.sandbox.limits import RunLimits, limit_prefix

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MODEL_SERVER_CODE = PROJECT_ROOT / "trainer" / "evaluator" / "model_server"  # a package that imports only itself
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")
SERVER_TMP = 256 << 20  # a model server's /tmp where it needs one (compiling kernels on CUDA)


@dataclass
class View:
    """What an isolated process sees beyond the system's trees (all absolute paths)."""
    writable: list[Path] = field(default_factory=list)   # its own directory first: bound read-write
    read_only: list[Path] = field(default_factory=list)  # shown read-only, also inside hidden trees
    hidden: list[Path] = field(default_factory=list)     # covered by an empty mount
    tmp_bytes: int | None = None                          # the size of its /tmp (and a quarter for /dev/shm)
    read_only_tmp: bool = False                           # an empty /tmp and /dev/shm it cannot write


def python_paths() -> list[Path]:
    """The interpreter and its libraries: a virtual environment, the Python it was made from, and where its
    site-packages really are (a link to another environment's)."""
    import site
    packages = {Path(p).resolve() for p in site.getsitepackages() if Path(p).is_dir()}
    return sorted({Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent.parent, *packages})


def library_paths() -> list[Path]:
    listed = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p.startswith("/")]
    cuda = os.environ.get("CUDA_HOME")
    return [Path(p) for p in [*listed, *([cuda] if cuda else [])] if Path(p).is_dir()]


def default_hidden() -> list[Path]:
    """Covered even where a shown tree contains them: the project (its code, any .env), the caller's home, the
    workspaces."""
    found = [PROJECT_ROOT, Path.home(), Path(os.environ.get("AUTORESEARCH_WORKSPACES", "workspace")).resolve()]
    return [p for p in found if p != Path("/")]


def _system_mounts() -> list[str]:
    args = []
    for name in SYSTEM_PATHS:
        path = Path(name)
        if path.is_symlink():  # /bin -> usr/bin on a merged /usr
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    return args


def _tmp_mounts(view: View) -> list[str]:
    sized = isolation().sized_tmpfs and view.tmp_bytes
    tmp = ["--size", str(view.tmp_bytes)] if sized else []
    shm = ["--size", str(max(1 << 20, view.tmp_bytes // 4))] if sized else []
    return ["--perms", "1777", *tmp, "--tmpfs", "/tmp", "--perms", "1777", *shm, "--tmpfs", "/dev/shm"]


def bwrap_command(command: list[str], view: View, inner: list[str] | None = None) -> list[str]:
    """command under bwrap as `isolation()` says, seeing what view says (mounts applied shallowest first,
    so a path shown inside a hidden tree stays shown, and a hidden one inside a shown tree stays hidden);
    inner runs inside the namespaces before the command (dropping to the run's uid)."""
    args = ["bwrap", *isolation().namespaces, "--die-with-parent", "--new-session", *_system_mounts(),
            "--dev", "/dev", "--proc", "/proc", *_tmp_mounts(view)]
    for device in sorted(Path("/dev").glob("nvidia*")) + sorted(Path("/dev").glob("kfd")):
        args += ["--dev-bind", str(device), str(device)]
    # (mount point, made empty here): directories on the way to a mount inside an empty one are bwrap's own, made
    # walkable; inside a bound tree they are the machine's
    mounted = [(Path("/"), True), (Path("/tmp"), True), (Path("/dev/shm"), True),
               *((Path(p), False) for p in SYSTEM_PATHS if Path(p).is_dir() and not Path(p).is_symlink())]
    shown = [*python_paths(), *library_paths(), *view.read_only]
    mounts = [(p, "hidden") for p in view.hidden] + [(p, "ro") for p in shown] + [(p, "rw") for p in view.writable]
    for path, how in sorted(mounts, key=lambda m: len(m[0].parts)):
        if not path.exists() or any(path == m for m, _ in mounted):
            continue
        if how == "hidden" and not path.is_dir():
            args += ["--ro-bind", "/dev/null", str(path)]
            continue
        under, empty = max(((m, e) for m, e in mounted if path.is_relative_to(m) and path != m),
                           key=lambda m: len(m[0].parts))
        if how == "ro" and not empty:  # already shown read-only (or writable, as the caller asked)
            continue
        if how == "hidden" and empty:  # nothing of it is there to hide
            continue
        if empty:
            for step in reversed(path.parents[:len(path.parts) - len(under.parts) - 1]):
                args += ["--perms", "0755", "--dir", str(step)]
        if how == "hidden":
            args += ["--perms", "0755", "--tmpfs", str(path)]
        else:
            args += ["--ro-bind" if how == "ro" else "--bind", str(path), str(path)]
        mounted.append((path, how == "hidden"))
    if view.read_only_tmp:  # both: /dev/shm would be as good a place as /tmp to leave something in
        args += ["--remount-ro", "/tmp", "--remount-ro", "/dev/shm"]
    if view.writable:
        args += ["--chdir", str(view.writable[0])]
    return [*args, "--", *(inner or []), *command]


def isolated_command(command: list[str], read_only: list[Path], hidden: list[Path] | None = None,
                     writable_tmp: bool = True) -> list[str]:
    """A model server's command: the model server's own package (none of the harness beside it), the working
    directory (the commit's files) and the files the command names (the sealed weights) shown read-only; nothing
    writable but, where writable_tmp, a small private /tmp and /dev/shm."""
    named = [Path(a) for a in command if a.startswith("/") and Path(a).exists()]
    shown = [MODEL_SERVER_CODE, Path.cwd(), *named, *read_only]
    limits = RunLimits(disk_bytes=SERVER_TMP, tmp_bytes=SERVER_TMP)  # its memory: the device's, one at a time
    view = View(read_only=shown, hidden=[*default_hidden(), cache_root(), *(hidden or [])], tmp_bytes=SERVER_TMP,
                read_only_tmp=not writable_tmp)
    uid = run_uid()
    inner = [*limit_prefix(limits, own_uid=uid is not None), *isolation().drop_to(uid)]
    return bwrap_command(["env", "HOME=/tmp", "TMPDIR=/tmp", "TORCHINDUCTOR_CACHE_DIR=/tmp/inductor", *command],
                         view, inner)
