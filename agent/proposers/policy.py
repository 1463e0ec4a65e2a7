"""The sandbox policy for train.py, checked on its syntax tree before anything is committed.

train.py is written by a model that is rewarded for a lower number. The rules close the
obvious ways to move the number without a better model: no network or process modules,
no dynamic code, no access to the validation or holdout data, no writes outside the run
directory, and no touching what it imports from prepare.py. The docker sandbox (no network,
read-only data and frozen files) and the post-run hash check stand behind this check.
"""

from __future__ import annotations

import ast
import functools
from collections import deque
from collections.abc import Iterator

from agent.proposers.edits import Edit, EditRejected, apply_edits
from trainer import parsing

FORBIDDEN_MODULES = {
    "socket", "ssl", "http", "urllib", "urllib3", "requests", "httpx", "aiohttp", "ftplib", "smtplib",
    "telnetlib", "xmlrpc", "websocket", "websockets", "subprocess", "multiprocessing", "pty", "ctypes", "cffi",
    "importlib", "runpy", "pickle", "marshal", "shutil", "signal", "posix", "nt", "builtins", "io", "codecs",
    "inspect", "tempfile", "gzip", "bz2", "lzma", "zipfile", "tarfile", "shelve", "dbm", "sqlite3", "mmap",
    "fcntl", "asyncio", "code", "pdb", "trace",
}
FORBIDDEN_OS_CALLS = {
    "system", "popen", "fork", "forkpty", "kill", "killpg", "execv", "execve", "execl", "execle", "execlp",
    "execlpe", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp",
    "spawnvpe", "posix_spawn", "posix_spawnp", "remove", "unlink", "rmdir", "removedirs", "rename", "replace",
    "chmod", "chown", "symlink", "link", "putenv", "open", "fdopen", "write", "chdir", "fchdir", "chroot",
    "mkdir", "makedirs", "renames", "truncate", "ftruncate", "mkfifo", "mknod", "lchown", "lchmod", "fchmod",
    "fchown", "utime", "dup", "dup2", "sendfile", "memfd_create", "setsid", "setpgid", "setpgrp", "pipe",
    "pwrite", "pwritev", "writev", "unsetenv",
}
FORBIDDEN_BUILTINS = {"eval", "exec", "compile", "__import__", "breakpoint", "globals", "locals", "vars",
                      "setattr", "delattr"}
FORBIDDEN_ATTRIBUTES = {"__globals__", "__code__", "__dict__", "__builtins__", "__subclasses__", "__bases__",
                        "__mro__", "__getattribute__", "__setattr__", "__delattr__", "__import__", "_getframe",
                        "f_globals", "f_locals", "f_back", "load_inline", "load_library",
                        "cpp_extension", "get_objects", "get_referrers", "get_referents", "settrace", "setprofile",
                        "_current_frames", "addaudithook", "hub", "_save", "_legacy_save", "attrgetter",
                        "methodcaller", "__loader__", "__spec__", "gi_frame", "cr_frame", "tb_frame"}
# Names that reach what the rules above forbid when only called: referring to them otherwise (g = getattr) is
# how a forbidden call would be hidden.
CALL_ONLY_BUILTINS = FORBIDDEN_BUILTINS | {"getattr", "open"}
PREPARE_CALLABLES = {"Tokenizer", "make_dataloader", "evaluate_bpb", "get_token_bytes"}
PREPARE_API = {"MAX_SEQ_LEN", "TIME_BUDGET", "BUDGET_CLOCK", "STEP_BUDGET", "EVAL_TOKENS", "VOCAB_SIZE", "Tokenizer",
               "make_dataloader", "evaluate_bpb", "get_token_bytes"}
HELD_OUT_WORDS = ("val", "holdout")
# Settings train.py may assign on imported modules; anything else (torch.x = ..., F.cross_entropy = ...,
# prepare.EVAL_TOKENS = ...) would change code that others rely on, the metric included.
MODULE_SETTINGS = ("torch.backends.", "torch._inductor.config.", "torch._dynamo.config.", "torch._functorch.config.")
WRITE_MODES = set("wax+")
PATH_WRITERS = {"write_text", "write_bytes", "mkdir", "touch", "unlink", "rmdir", "rename", "replace",
                "symlink_to", "hardlink_to", "chmod"}
# Of those, the ones no other common type has: on anything but Path("literal") they are refused, since the
# path a variable holds cannot be checked here.
PATH_ONLY_WRITERS = PATH_WRITERS - {"rename", "replace"}


def checked_source(parent: str, edits: list[Edit]) -> str:
    """train.py after the edits, once they applied to parent and the result passed the policy."""
    source = apply_edits(parent, edits)
    check_policy(source, parent=parent)
    return source


def check_policy(source: str, parent: str | None = None) -> None:
    """Raises EditRejected listing every violation with its line; with the parent's source, also
    rejects an edit that changes how train.py is seeded."""
    tree = parsing.parse(source)
    checker = _Checker(tree)
    checker.visit(tree)
    if checker.violations:
        listed = "\n".join(f"- line {line}: {message}" for line, message in sorted(checker.violations))
        raise EditRejected(f"train.py breaks the sandbox policy:\n{listed}")
    if parent is not None:
        check_seeding_unchanged(parent, source, checker.seeding)


def check_seeding_unchanged(parent: str, source: str, after: list[str] | None = None) -> None:
    """The seed belongs to the harness: it passes AUTORESEARCH_SEED so that re-runs with other seeds
    measure noise. A changed seed only moves val_bpb by luck, so it is never an experiment. (after: seeding() of
    source, when already known.)"""
    before = list(_seeding_of(parent))
    after = after if after is not None else seeding(parsing.parse(source))
    if before != after:
        changed = sorted(set(after) - set(before)) or sorted(set(before) - set(after))
        raise EditRejected(
            f"the edit changes how train.py is seeded ({'; '.join(changed)}). Every run gets its seed from the "
            "harness through AUTORESEARCH_SEED, and close calls are re-run with other seeds: a different seed "
            "moves val_bpb only by luck, so it cannot win. Leave the seeding as it is and change the model, "
            "the optimizer or the schedule instead.")


@functools.lru_cache(maxsize=32)
def _seeding_of(source: str) -> tuple[str, ...]:
    """seeding() of a parent train.py: the same few parents are checked against for every proposal."""
    return tuple(seeding(parsing.parse(source)))


def seeding(tree: ast.Module) -> list[str]:
    """Every place that sets a seed: assignments to a name with "seed" in it and calls of a function
    with "seed" in its name, as source text, in a stable order."""
    return sorted(text for text in map(_seeding_text, _walk(tree)) if text)


def _seeding_text(node: ast.AST) -> str | None:
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any("seed" in _own_name(t).lower() for t in targets):
            return ast.unparse(node)
    elif isinstance(node, ast.Call):
        if "seed" in _own_name(node.func).lower():
            return ast.unparse(node)
    elif isinstance(node, ast.ImportFrom) and any("seed" in a.name.lower() for a in node.names):
        return ast.unparse(node)  # a seeding function imported under another name
    return None


def _walk(tree: ast.AST, parents: dict[ast.AST, ast.AST] | None = None) -> Iterator[ast.AST]:
    """ast.walk's nodes in ast.walk's order (breadth first, children in field order), noting each child's parent;
    written out because ast.walk's generic helpers cost several times more, and this runs for every proposal."""
    queue = deque([tree])
    while queue:
        node = queue.popleft()
        for name in node._fields:
            value = getattr(node, name, None)
            for child in (value,) if isinstance(value, ast.AST) else value if isinstance(value, list) else ():
                if isinstance(child, ast.AST):
                    if parents is not None:
                        parents[child] = node
                    queue.append(child)
        yield node


class _Checker(ast.NodeVisitor):
    def __init__(self, tree: ast.Module):
        self.violations: list[tuple[int, str]] = []
        self.parents: dict[ast.AST, ast.AST] = {}
        # Names bound by imports anywhere in the file, so that the rules do not depend on order, and the places
        # that set a seed: one walk of the tree collects them all.
        self.prepare_names: set[str] = set()
        self.aliases: dict[str, str] = {}
        self.imported: set[str] = set()
        self.seeding: list[str] = []
        for node in _walk(tree, self.parents):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.imported.update((a.asname or a.name).split(".")[0] for a in node.names)
                if isinstance(node, ast.Import):
                    self.aliases.update((a.asname or a.name, a.name) for a in node.names)
                elif node.module == "prepare":
                    self.prepare_names.update(a.asname or a.name for a in node.names)
            if seeded := _seeding_text(node):
                self.seeding.append(seeded)
        self.seeding.sort()
        self.os_names = {name for name, module in self.aliases.items() if module == "os"} | {"os"}
        self.torch_names = {name for name, module in self.aliases.items() if module == "torch"} | {"torch"}
        self.numpy_names = {name for name, module in self.aliases.items() if module == "numpy"} | {"np"}
        self.sys_names = {name for name, module in self.aliases.items() if module == "sys"} | {"sys"}

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def _check_target(self, target: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._check_target(element)
        elif isinstance(target, (ast.Attribute, ast.Subscript)) and _base_name(target) in self.imported:
            written = ast.unparse(target)
            already = _base_name(target) in self.prepare_names or written.startswith("sys.modules")  # own rules
            if not written.startswith(MODULE_SETTINGS) and not already:
                self.flag(target, f"{written}: train.py may not assign to what it imports (only torch settings "
                                  f"under {', '.join(p.rstrip('.') for p in MODULE_SETTINGS)})")

    def flag(self, node: ast.AST, message: str) -> None:
        self.violations.append((getattr(node, "lineno", 0), message))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top in FORBIDDEN_MODULES:
                self.flag(node, f"import of {alias.name} is not allowed (no network, processes or dynamic loading)")
            elif top == "prepare":
                self.flag(node, "import the names you need from prepare (from prepare import ...), not the module")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        top = (node.module or "").split(".")[0]
        if any(alias.name == "*" for alias in node.names):
            self.flag(node, "star imports are not allowed: import names explicitly")
        if node.level:
            self.flag(node, "relative imports are not allowed")
        elif top in FORBIDDEN_MODULES:
            self.flag(node, f"import from {node.module} is not allowed (no network, processes or dynamic loading)")
        elif top == "prepare":
            for alias in node.names:
                if alias.name not in PREPARE_API:
                    self.flag(node, f"prepare.{alias.name} is not part of what train.py may use "
                                    f"({', '.join(sorted(PREPARE_API))})")
        elif top == "os":
            for alias in node.names:
                if alias.name in FORBIDDEN_OS_CALLS:
                    self.flag(node, f"os.{alias.name} is not allowed")
        elif top == "sys" and any(alias.name == "modules" for alias in node.names):
            self.flag(node, "sys.modules may not be used")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in FORBIDDEN_BUILTINS:
            self.flag(node, f"{func.id}() is not allowed")
        if isinstance(func, ast.Name) and func.id == "getattr":
            self._check_getattr(node)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id in self.os_names and func.attr in FORBIDDEN_OS_CALLS:
                self.flag(node, f"os.{func.attr}() is not allowed")
        if isinstance(func, ast.Name) and func.id in self.prepare_names:
            self._check_data_call(node, func.id)
        writes, path = _written_path(node, self.torch_names, self.numpy_names)
        if writes and not (isinstance(path, ast.Constant) and isinstance(path.value, str)
                           and _inside_run_dir(path.value)):
            self.flag(node, "files may only be written inside the run directory, through a relative literal path")
        self.generic_visit(node)

    def _check_getattr(self, node: ast.Call) -> None:
        name = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
        if not isinstance(name, str):
            self.flag(node, "getattr() needs a literal attribute name")
        elif (name in FORBIDDEN_OS_CALLS | FORBIDDEN_ATTRIBUTES | FORBIDDEN_BUILTINS or name.startswith("__")
              or name == "modules"):
            self.flag(node, f"getattr(..., {name!r}) reaches what train.py may not use")
        elif "seed" in name.lower():
            self.flag(node, f"getattr(..., {name!r}): the seed belongs to the harness (AUTORESEARCH_SEED)")

    def _check_data_call(self, node: ast.Call, name: str) -> None:
        if any(k.arg in ("split", "data_dir") for k in node.keywords):
            self.flag(node, f"{name}() may not be pointed at another split or data directory")
        if name == "evaluate_bpb" and len(node.args) > 3:
            self.flag(node, "evaluate_bpb() takes (model, tokenizer, batch_size) only")
        if name == "make_dataloader":
            split = node.args[3] if len(node.args) > 3 else None
            if not (isinstance(split, ast.Constant) and split.value == "train"):
                self.flag(node, 'make_dataloader() must read the "train" split, written as that literal')

    def visit_Expr(self, node: ast.Expr) -> None:
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):  # docstrings
            self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            text = node.value.lower()
            if text in HELD_OUT_WORDS or "holdout" in text or "/val" in text or text.startswith("val/"):
                self.flag(node, f"{node.value!r}: train.py may not read validation or holdout data; "
                                "evaluate_bpb in prepare.py scores the model")
            if "prepare.py" in text or "track.json" in text:
                self.flag(node, f"{node.value!r}: prepare.py and track.json are frozen; do not open them")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in FORBIDDEN_ATTRIBUTES:
            self.flag(node, f".{node.attr} may not be used")
        if node.attr == "modules" and isinstance(node.value, ast.Name) and node.value.id in self.sys_names:
            self.flag(node, "sys.modules may not be used")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            base = _base_name(node)
            if base in self.prepare_names or base == "prepare":
                self.flag(node, f"{base} comes from prepare.py and may not be changed")
            if node.attr.startswith("__") and node.attr.endswith("__"):
                self.flag(node, f"assigning {node.attr} is not allowed")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        parent = self.parents.get(node)
        if node.id in CALL_ONLY_BUILTINS and not (isinstance(parent, ast.Call) and parent.func is node):
            self.flag(node, f"{node.id} may only be called directly, not referred to")
        if isinstance(node.ctx, (ast.Store, ast.Del)) and node.id in self.prepare_names:
            self.flag(node, f"{node.id} comes from prepare.py and may not be redefined")
        elif node.id in self.prepare_names & PREPARE_CALLABLES:
            parent = self.parents.get(node)
            used_directly = (isinstance(parent, ast.Call) and parent.func is node) or isinstance(parent, ast.Attribute)
            if not used_directly:
                self.flag(node, f"{node.id} from prepare.py may only be called (or its attributes read), "
                                "not passed around or aliased")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._definition(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._definition(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._definition(node)

    def _definition(self, node) -> None:
        if node.name in self.prepare_names:
            self.flag(node, f"{node.name} comes from prepare.py and may not be redefined")
        self.generic_visit(node)


def _own_name(node: ast.AST) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _base_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _written_path(node: ast.Call, torch_names: set[str], numpy_names: set[str]) -> tuple[bool, ast.AST | None]:
    """Whether the call writes a file, and the expression naming that file."""
    func = node.func
    if isinstance(func, ast.Name) and func.id == "open":
        return _opens_for_writing(node, 1), node.args[0] if node.args else None
    if not isinstance(func, ast.Attribute):
        return False, None
    owner = func.value.id if isinstance(func.value, ast.Name) else None
    if _base_name(func.value) in torch_names and func.attr == "save":
        return True, node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "f"),
                                                                  None)
    if owner in numpy_names and func.attr.startswith("save") or func.attr == "tofile":
        return True, node.args[0] if node.args else None
    receiver = func.value
    if not (isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "Path"):
        if func.attr in PATH_ONLY_WRITERS or func.attr == "open" and _opens_for_writing(node, 0):
            return True, None  # a path held elsewhere: not checkable here
        return False, None
    path = receiver.args[0] if receiver.args else None
    if func.attr in PATH_WRITERS:
        return True, path
    if func.attr == "open":
        return _opens_for_writing(node, 0), path
    return False, None


def _opens_for_writing(node: ast.Call, mode_position: int) -> bool:
    mode = node.args[mode_position] if len(node.args) > mode_position else next(
        (k.value for k in node.keywords if k.arg == "mode"), None)
    if mode is None:
        return False
    return not isinstance(mode, ast.Constant) or bool(WRITE_MODES & set(str(mode.value)))


def _inside_run_dir(path: str) -> bool:
    return not path.startswith(("/", "~")) and ".." not in path.replace("\\", "/").split("/")
