"""The sandbox policy for train.py, checked on its syntax tree before anything is committed.

train.py is written by a model that is rewarded for a lower number. The rules close the
obvious ways to move the number without a better model: no network or process modules,
no dynamic code, no access to the validation or holdout data, no writes outside the run
directory (agent/proposers/file_writers.py knows the writers), and no touching what it imports
from prepare.py. It is the outer layer: the run's sandbox (trainer/sandbox/untrusted.py: an allowlisted view,
no network, limits, nothing of it outliving it), the seal and the trusted evaluator stand behind it.
"""

from __future__ import annotations

import ast
import functools
from collections import deque
from collections.abc import Iterator

from agent.proposers.edits import Edit, EditRejected, apply_edits
from agent.proposers.file_writers import (
    METHOD_WRITERS,
    PATH_KEYWORDS,
    WRITER_ATTRIBUTES,
    WRITER_NAMES,
    Writer,
    argument,
    inside_run_dir,
    module_writer,
    opens_for_writing,
    path_method_write,
    shortened,
)
from trainer.files import parsing

ESCAPES = "no network, processes or dynamic loading"
DATA_AND_FILES = ("train.py gets its data only through prepare.py and writes files only with open, torch.save or "
                  "np.save inside the run directory: use torch and numpy")
FORBIDDEN_MODULES = dict.fromkeys([
    "socket", "ssl", "http", "urllib", "urllib3", "requests", "httpx", "aiohttp", "ftplib", "smtplib",
    "telnetlib", "xmlrpc", "websocket", "websockets", "subprocess", "multiprocessing", "pty", "ctypes", "cffi",
    "importlib", "runpy", "pickle", "marshal", "shutil", "signal", "posix", "nt", "builtins", "io", "codecs",
    "inspect", "tempfile", "gzip", "bz2", "lzma", "zipfile", "tarfile", "shelve", "dbm", "sqlite3", "mmap",
    "fcntl", "asyncio", "code", "pdb", "trace", "timeit", "cProfile", "profile", "concurrent", "pkgutil", "pydoc",
    "imp", "zipimport",
], ESCAPES) | dict.fromkeys([
    "pyarrow", "pandas", "polars", "fastparquet", "duckdb", "h5py", "tables", "zarr", "netCDF4", "xarray", "lmdb",
    "safetensors", "PIL", "imageio", "cv2", "matplotlib", "fsspec", "datasets", "joblib", "dill", "cloudpickle",
], DATA_AND_FILES)
# A module reached as another's attribute (os.sys, torch.serialization.pickle, torch.multiprocessing) is refused as
# its import would be; names that are also common attributes of allowed modules (torch.jit.trace) are left out.
MODULE_ATTRIBUTES = (set(FORBIDDEN_MODULES) - {"trace", "code", "profile", "io", "nt"}) | {"sys", "modules"}
# Keyword values that make a loader run pickled code: anything but these literals is refused.
SAFE_LOADING = {"allow_pickle": False, "weights_only": True}
FORBIDDEN_OS_CALLS = {
    "system", "popen", "fork", "forkpty", "kill", "killpg", "execv", "execve", "execl", "execle", "execlp",
    "execlpe", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp",
    "spawnvpe", "posix_spawn", "posix_spawnp", "remove", "unlink", "rmdir", "removedirs", "rename", "replace",
    "chmod", "chown", "symlink", "link", "putenv", "open", "fdopen", "write", "chdir", "fchdir", "chroot",
    "mkdir", "makedirs", "renames", "truncate", "ftruncate", "mkfifo", "mknod", "lchown", "lchmod", "fchmod",
    "fchown", "utime", "dup", "dup2", "sendfile", "memfd_create", "setsid", "setpgid", "setpgrp", "pipe",
    "pwrite", "pwritev", "writev", "unsetenv", "pipe2", "splice", "copy_file_range", "tee", "vmsplice", "close",
    "closerange",
}
# How the weights are saved and loaded is torch's own: the harness counts and checks the sealed weights in that
# form (trainer/sandbox/seal.py), and the trusted evaluator loads them with it.
SAVED_FORM = {"state_dict", "load_state_dict", "_save_to_state_dict", "_load_from_state_dict", "get_extra_state",
              "set_extra_state", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__"}
STATE_HOOKS = ("state_dict_hook", "state_dict_pre_hook", "state_dict_post_hook")
# Reading a tensor's bits as another dtype (and so packing weights where the count above would not see them).
REINTERPRETING = {"frombuffer", "untyped_storage", "_typed_storage", "storage", "set_", "view_as_real",
                  "view_as_complex", "view_as_real_copy", "view_as_complex_copy"}
DTYPE_NAMES = {"float32", "float", "float16", "half", "bfloat16", "float64", "double", "complex64", "cfloat",
               "complex128", "cdouble", "complex32", "chalf", "int8", "uint8", "int16", "short", "uint16", "int32",
               "int", "uint32", "int64", "long", "uint64", "bool", "float8_e4m3fn", "float8_e5m2"}
# Which devices a run sees is the harness's choice (one GPU per slot).
DEVICE_SELECTORS = {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                    "NVIDIA_VISIBLE_DEVICES"}
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
PREPARE_CALLABLES = {"Tokenizer", "make_dataloader", "evaluate_bpb", "get_token_bytes", "budget_steps",
                     "training_flops_per_token"}
# BUDGET_CLOCK: the frozen prepare.py of a cpu workspace made before that track counted FLOPs still has it.
PREPARE_API = PREPARE_CALLABLES | {"MAX_SEQ_LEN", "TIME_BUDGET", "BUDGET_CLOCK", "STEP_BUDGET", "FLOPS_BUDGET",
                                   "EVAL_TOKENS", "VOCAB_SIZE"}
HELD_OUT_WORDS = ("val", "holdout")
# Settings train.py may assign on imported modules; anything else (torch.x = ..., F.cross_entropy = ...,
# prepare.EVAL_TOKENS = ...) would change code that others rely on, the metric included.
MODULE_SETTINGS = ("torch.backends.", "torch._inductor.config.", "torch._dynamo.config.", "torch._functorch.config.")
# Words of torch settings (MODULE_SETTINGS) that name where torch writes debug output, traces or caches (or reads
# code from): trace.debug_dir, debug_dir_root, log_file_name.
SETTING_PATH_WORDS = {"dir", "path", "file", "root"}


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
        check_seeding_unchanged(parent, checker.seeding)


def check_seeding_unchanged(parent: str, after: list[str]) -> None:
    """The seed belongs to the harness: it passes AUTORESEARCH_SEED so that re-runs with other seeds
    measure noise. A changed seed only moves val_bpb by luck, so it is never an experiment. (after: seeding() of
    the edited source.)"""
    before = list(_seeding_of(parent))
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
        called = _own_name(node.func).lower()
        if "seed" in called or "rng" in called or "generator" in called or called in ("set_state", "get_state"):
            return ast.unparse(node)  # a generator's state set or taken is a seed by another name
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
        # What each imported name is, as a dotted name (np: numpy, open_memmap: numpy.lib.format.open_memmap).
        self.modules: dict[str, str] = {"np": "numpy", "torch": "torch"}
        self.seeding: list[str] = []
        for node in _walk(tree, self.parents):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.imported.update((a.asname or a.name).split(".")[0] for a in node.names)
                if isinstance(node, ast.Import):
                    self.aliases.update((a.asname or a.name, a.name) for a in node.names)
                    self.modules.update((a.asname, a.name) if a.asname else (a.name.split(".")[0],) * 2
                                        for a in node.names)
                else:
                    if node.module == "prepare":
                        self.prepare_names.update(a.asname or a.name for a in node.names)
                    if node.module and not node.level:
                        self.modules.update((a.asname or a.name, f"{node.module}.{a.name}") for a in node.names)
            if seeded := _seeding_text(node):
                self.seeding.append(seeded)
        self.seeding.sort()
        self.imported_writers = {name for name, qualified in self.modules.items() if module_writer(qualified)}
        self.os_names = {name for name, module in self.aliases.items() if module == "os"} | {"os"}
        self.sys_names = {name for name, module in self.aliases.items() if module == "sys"} | {"sys"}

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target, node.value)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def _check_target(self, target: ast.AST, value: ast.AST | None = None) -> None:
        """value: what is assigned to target as a whole, when that is known."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._check_target(element)
        elif isinstance(target, (ast.Attribute, ast.Subscript)) and _base_name(target) in self.imported:
            written = ast.unparse(target)
            already = _base_name(target) in self.prepare_names or written.startswith("sys.modules")  # own rules
            if written.startswith(MODULE_SETTINGS):
                if isinstance(target, ast.Attribute) and SETTING_PATH_WORDS.intersection(target.attr.split("_")):
                    self._check_written(target, f"setting {written}", [value])
            elif not already:
                self.flag(target, f"{written}: train.py may not assign to what it imports (only torch settings "
                                  f"under {', '.join(p.rstrip('.') for p in MODULE_SETTINGS)})")

    def flag(self, node: ast.AST, message: str) -> None:
        self.violations.append((getattr(node, "lineno", 0), message))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top in FORBIDDEN_MODULES:
                self.flag(node, f"import of {alias.name} is not allowed ({FORBIDDEN_MODULES[top]})")
            elif top == "prepare":
                self.flag(node, "import the names you need from prepare (from prepare import ...), not the module")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        top = (node.module or "").split(".")[0]
        if any(alias.name == "*" for alias in node.names):
            self.flag(node, "star imports are not allowed: import names explicitly")
        if node.level:
            self.flag(node, "relative imports are not allowed")
        elif top in FORBIDDEN_MODULES:
            self.flag(node, f"import from {node.module} is not allowed ({FORBIDDEN_MODULES[top]})")
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
        for keyword in node.keywords:
            if keyword.arg == "pickle_module" or keyword.arg in SAFE_LOADING and not (
                    isinstance(keyword.value, ast.Constant) and keyword.value.value is SAFE_LOADING[keyword.arg]):
                self.flag(node, f"{keyword.arg}={ast.unparse(keyword.value)}: loading pickled objects runs code; "
                                f"leave it out (or {keyword.arg}={SAFE_LOADING.get(keyword.arg)})")
            if keyword.arg in DEVICE_SELECTORS:
                self.flag(node, f"{keyword.arg}: which devices a run sees is the harness's choice")
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
        if isinstance(func, ast.Attribute) and func.attr == "view" and (
                any(k.arg == "dtype" for k in node.keywords)
                or any(isinstance(a, ast.Attribute) and a.attr in DTYPE_NAMES for a in node.args)):
            self.flag(node, f"{shortened(ast.unparse(node))}: reading a tensor's bits as another dtype is not "
                            "allowed; convert with .to(dtype)")
        if (paths := self._written_paths(node)) is not None:
            self._check_written(node, f"{shortened(ast.unparse(func))}()", paths)
        self.generic_visit(node)

    def _check_written(self, node: ast.AST, writer: str, paths: list[ast.AST | None]) -> None:
        """Flags a write unless every path it names is a relative string literal inside the run directory."""
        for path in paths:
            if path is None:
                wrong = "writes to a path that is not given here"
            elif not isinstance(path, ast.Constant):
                wrong = f"writes to {shortened(ast.unparse(path))}, which is not a literal"
            elif not (isinstance(path.value, str) and inside_run_dir(path.value)):
                wrong = f"writes to {path.value!r}"
            else:
                continue
            self.flag(node, f"files may only be written inside the run directory, through a relative literal path: "
                            f"{writer} {wrong}. Give it a relative path inside the run directory as a string literal "
                            "(e.g. \"out/result.bin\"), or leave the write out")
            return

    def _written_paths(self, node: ast.Call) -> list[ast.AST | None] | None:
        """The arguments naming the files a call writes (None for a path this check cannot see), or None when the
        call writes no file."""
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            return [argument(node, 0, "file")] if opens_for_writing(node, 1) else None
        if (path := path_method_write(node)) is not False:
            return [path]
        writer = self._writer(func)
        if writer is None or writer.mode and not opens_for_writing(node, *writer.mode):
            return None
        paths = [given for position in writer.positions if (given := argument(node, position)) is not None]
        paths += [k.value for k in node.keywords if k.arg in PATH_KEYWORDS or k.arg is None]
        return paths or (None if writer.optional else [None])

    def _writer(self, func: ast.AST) -> Writer | None:
        """The writer a called expression is: a function of an imported module by its dotted name, else a method
        by its name."""
        name = _own_name(func)
        if not (name in WRITER_NAMES or name.startswith("save") or name in self.imported_writers):
            return None
        if qualified := self._qualified(func):
            return module_writer(qualified)
        if isinstance(func, ast.Attribute):
            return WRITER_ATTRIBUTES.get(name) or METHOD_WRITERS.get(name)
        return None

    def _qualified(self, node: ast.AST) -> str | None:
        """The dotted name an expression is through the file's imports (np.lib.format.open_memmap:
        numpy.lib.format.open_memmap), or None when it does not start at an imported name."""
        attributes = []
        while isinstance(node, ast.Attribute):
            attributes.append(node.attr)
            node = node.value
        if not (isinstance(node, ast.Name) and node.id in self.modules):
            return None
        return ".".join([self.modules[node.id], *reversed(attributes)])

    def _check_getattr(self, node: ast.Call) -> None:
        name = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
        if not isinstance(name, str):
            self.flag(node, "getattr() needs a literal attribute name")
        elif (name in FORBIDDEN_OS_CALLS | FORBIDDEN_ATTRIBUTES | FORBIDDEN_BUILTINS or name.startswith("__")
              or name == "modules"):
            self.flag(node, f"getattr(..., {name!r}) reaches what train.py may not use")
        elif name in WRITER_ATTRIBUTES or name in METHOD_WRITERS:
            self.flag(node, f"getattr(..., {name!r}) reaches a file writer: call .{name}() directly, with a relative "
                            "literal path inside the run directory")
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
            if node.value.upper() in DEVICE_SELECTORS:
                self.flag(node, f"{node.value!r}: which devices a run sees is the harness's choice")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in FORBIDDEN_ATTRIBUTES:
            self.flag(node, f".{node.attr} may not be used")
        if node.attr in REINTERPRETING:
            self.flag(node, f".{node.attr}: reading a tensor's bits as another dtype or buffer is not allowed")
        if node.attr.endswith(STATE_HOOKS) or node.attr in SAVED_FORM and isinstance(node.ctx, (ast.Store, ast.Del)):
            self.flag(node, f".{node.attr}: how the weights are saved and loaded is torch's own (the harness counts "
                            "and checks them in that form)")
        if isinstance(node.ctx, ast.Load) and self._writer(node):
            self._check_called(node)
        if node.attr == "modules" and isinstance(node.value, ast.Name) and node.value.id in self.sys_names:
            self.flag(node, "sys.modules may not be used")
        elif node.attr in MODULE_ATTRIBUTES:
            self.flag(node, f"{shortened(ast.unparse(node))}: .{node.attr} reaches a module (or the process's "
                            "modules) train.py may not use; import what you need directly")
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
        if node.id in self.imported_writers and isinstance(node.ctx, ast.Load):
            self._check_called(node)
        if isinstance(node.ctx, (ast.Store, ast.Del)) and node.id in self.prepare_names:
            self.flag(node, f"{node.id} comes from prepare.py and may not be redefined")
        elif node.id in self.prepare_names & PREPARE_CALLABLES:
            used_directly = (isinstance(parent, ast.Call) and parent.func is node) or isinstance(parent, ast.Attribute)
            if not used_directly:
                self.flag(node, f"{node.id} from prepare.py may only be called (or its attributes read), "
                                "not passed around or aliased")

    def _check_called(self, node: ast.Attribute | ast.Name) -> None:
        """A writer referred to but not called (keep = torch.save) would write where this check cannot see."""
        parent = self.parents.get(node)
        if not (isinstance(parent, ast.Call) and parent.func is node):
            self.flag(node, f"{shortened(ast.unparse(node))} writes files and may only be called directly, with a "
                            "relative literal path inside the run directory, not referred to")

    def _definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        if node.name in self.prepare_names:
            self.flag(node, f"{node.name} comes from prepare.py and may not be redefined")
        if node.name in SAVED_FORM or node.name.endswith(STATE_HOOKS):
            self.flag(node, f"{node.name}: how the weights are saved and loaded is torch's own (the harness counts "
                            "and checks them in that form)")
        self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _definition


def _own_name(node: ast.AST) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _base_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


