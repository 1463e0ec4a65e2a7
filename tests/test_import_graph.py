"""The packages' imports, read from the source (nothing is imported): no module reaches itself again
through its imports, lazy ones inside functions included, and trainer/ never imports agent/."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "trainer")
# The boundary: what decides whether a run is trusted. It must not pull in the downloader's network and terminal stack.
BOUNDARY = ("trainer.sandbox", "trainer.evaluator")
SECURITY_PATH = (*BOUNDARY, "trainer.files.hashing", "trainer.runs.training_run", "trainer.remote.worker",
                 "agent.judging.verify")
NOT_ON_THE_SECURITY_PATH = {"httpx", "rich", "tenacity"}


@functools.cache
def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


@functools.cache
def imported_names(module: str, path: Path) -> frozenset[str]:
    """Every dotted name an import statement of the file names, relative imports resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return frozenset(names)


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (a name that is not a module counts as its package)."""
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(module, path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_walk_sees_every_kind_of_import():
    graph = import_graph(project_modules())
    assert "trainer.prepare" in graph["trainer.tracks.corpus"]            # from trainer.prepare import ...
    assert "trainer.remote.spool" in graph["trainer.remote.worker"]               # from trainer import spool as ...
    assert "agent.running.evaluator" in graph["agent.running.runner"]               # an import inside a function
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_agent_or_trainer():
    assert cycles(import_graph(project_modules())) == []


def test_trainer_never_imports_agent():
    graph = import_graph(project_modules())
    upward = {module: sorted(t for t in targets if t.split(".")[0] == "agent")
              for module, targets in graph.items() if module.startswith("trainer")}
    assert {module: targets for module, targets in upward.items() if targets} == {}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def members(modules: dict[str, Path], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == name or m.startswith(name + ".") for name in names)]


def test_the_security_path_imports_no_network_or_terminal_library():
    modules = project_modules()
    graph = import_graph(modules)
    pulled = {}
    for start in members(modules, SECURITY_PATH):
        for module in reachable(graph, start):
            outside = {name.split(".")[0] for name in imported_names(module, modules[module])}
            if found := outside & NOT_ON_THE_SECURITY_PATH:
                pulled[f"{start} -> {module}"] = sorted(found)
    assert pulled == {}
    assert "trainer.tracks.download" in reachable(graph, "trainer.tracks.builder")  # the walk does reach it
    assert "trainer.sandbox.seal" in members(modules, BOUNDARY) and len(members(modules, BOUNDARY)) > 10


def test_the_model_server_s_package_imports_only_itself():
    """The model server's sandbox shows it that package alone: an import of anything beside it would fail there."""
    graph = import_graph(project_modules())
    package = "trainer.evaluator.model_server"
    outside = {module: sorted(t for t in targets if not t.startswith(package))
               for module, targets in graph.items() if module.startswith(package)}
    assert len(outside) >= 5 and {module: found for module, found in outside.items() if found} == {}


def test_every_runner_runs_the_one_run_path_and_a_cluster_task_needs_no_agent():
    graph = import_graph(project_modules())
    for runs_commits in ("agent.running.runner", "trainer.remote.worker", "trainer.remote.ray_task"):
        assert "trainer.runs.training_run" in graph[runs_commits], runs_commits
    assert "trainer.remote.ray_task" in graph["agent.running.ray_runner"]
    assert not any(module.startswith("agent") for module in reachable(graph, "trainer.remote.ray_task"))


# agent/ in layers, lowest first: a module imports only from its own layer or below. The modules at agent/'s root
# are split: settings, untrusted and workspace lie under every folder, cli, loop and observe over all of them.
LAYERS = (("agent.settings", "agent.untrusted", "agent.workspace"), ("agent.llm",), ("agent.recording",),
          ("agent.importing",), ("agent.running",), ("agent.judging",), ("agent.proposers",), ("agent.report",),
          ("agent.tracking",), ("agent.steps",), ("agent.bundle",),
          ("agent.loop", "agent.observe", "agent.doctor", "agent.cli"))
# trainer/ in wings, lowest first: train.py and prepare.py at the top import nothing of the harness; the model
# server's package imports only itself; the boundary (sandbox, evaluator) lies under the tracks, the run path and
# the remote transports.
# track.json's typed record sits with prepare.py, whose constants it types: the seal holds a run to them
TRAINER_LAYERS = (("trainer.prepare", "trainer.train", "trainer.files", "trainer.tracks.spec"),
                  ("trainer.evaluator.model_server",),
                  ("trainer.sandbox",), ("trainer.evaluator",), ("trainer.tracks",), ("trainer.runs",),
                  ("trainer.remote",))


def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int | None:
    for level, members in enumerate(layers):
        if any(module == member or module.startswith(member + ".") for member in members):
            return level
    return None


def upward_arrows(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    def level(module: str) -> int | None:
        return layer_of(module, layers)
    return sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                  if level(module) is not None and level(target) is not None and level(target) > level(module))


def test_every_agent_module_has_a_layer():
    assert [m for m in project_modules() if m.startswith("agent.") and layer_of(m) is None] == []


def test_no_arrow_runs_up_between_the_layers_of_agent():
    assert upward_arrows(import_graph(project_modules())) == []
    assert upward_arrows({"agent.recording.ledger": {"agent.report.page"}}) == [
        "agent.recording.ledger -> agent.report.page"]


def test_every_trainer_module_has_a_wing_and_only_train_py_and_prepare_py_lie_at_the_top():
    modules = [m for m in project_modules() if m.startswith("trainer.")]
    assert [m for m in modules if layer_of(m, TRAINER_LAYERS) is None] == []
    assert sorted(m for m in modules if m.count(".") == 1 and not (ROOT / m.replace(".", "/")).is_dir()) == [
        "trainer.prepare", "trainer.train"]


def test_no_arrow_runs_up_between_the_wings_of_trainer():
    assert upward_arrows(import_graph(project_modules()), TRAINER_LAYERS) == []
    assert upward_arrows({"trainer.sandbox.seal": {"trainer.runs.triage"}}, TRAINER_LAYERS) == [
        "trainer.sandbox.seal -> trainer.runs.triage"]
