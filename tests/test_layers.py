"""Imports run one way: what a module imports is read from its source (nothing is imported).

In every folder of the source packages (the root that holds them, each package, each
sub-package), the modules and sub-packages side by side import each other without a cycle; and
the top-level packages import one way, each only those below it (bus <- config <- sessions <-
channels <- gateway); and inside `gateway/` the layers run one way: the turn core
(`gateway/turn/`), which one process and the cluster both build on, reaches none of the cluster,
the daemon or the command line; the cluster reaches neither the daemon nor the command line; the
daemon does not reach the command line. What `gateway/` keeps beside its layers (logs, metrics,
the services a profile is handed, pairing, a profile's channels, the agents) is shared by all of
them and reaches none.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bus", "config", "sessions", "channels", "gateway")
ROOT_FOLDER = "<root>"

#: Cycles known today, by folder, each with why it is not fixed yet: the list may only shrink.
KNOWN_CYCLES: Mapping[str, tuple[frozenset[str], str]] = {}

#: The layers from the bottom: each package imports only those before it.
LAYERS = ("bus", "config", "sessions", "channels")
#: Imports that go up a layer, by (importer, imported module), each with why: it may only shrink.
KNOWN_UPWARD_IMPORTS: Mapping[tuple[str, str], str] = {}

#: `gateway/`'s layers, lowest first: each builds on those before it, never on one after it.
GATEWAY_LAYERS = ("gateway.turn", "gateway.cluster", "gateway.daemon", "gateway.cli")
#: What starts the process (`python -m gateway`): it sits on top of every layer.
ENTRY_POINT = "gateway.__main__"


@cache
def source_modules() -> dict[str, Path]:
    """Every module of the source packages by dotted name (a package by its `__init__.py`)."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


@cache
def imports_of(module: str) -> frozenset[str]:
    """The source modules `module` imports anywhere in its file (at the top, in a function,
    for type checking only: each is a dependency a reader follows)."""
    modules = source_modules()
    path = modules[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from package import module` imports the module; `from module import name`, it.
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        found.update(name for name in names if name in modules and name != module)
    return frozenset(found)


def folders() -> set[str]:
    """The root of the source packages and every package and sub-package in them."""
    found = {ROOT_FOLDER}
    for module in source_modules():
        parts = module.split(".")
        found.update(".".join(parts[:depth]) for depth in range(1, len(parts)))
    found.update(module for module, path in source_modules().items() if path.name == "__init__.py")
    return found


def child_of(folder: str, module: str) -> str | None:
    """The module or sub-package directly in `folder` that `module` is or lies in."""
    if folder == ROOT_FOLDER:
        return module.split(".")[0]
    if not module.startswith(f"{folder}."):
        return None
    return ".".join(module.split(".")[: folder.count(".") + 2])


def folder_graph(folder: str) -> dict[str, set[str]]:
    """Which of the modules and sub-packages side by side in `folder` import which."""
    graph: dict[str, set[str]] = {}
    for module in source_modules():
        importer = child_of(folder, module)
        if importer is None:
            continue
        edges = graph.setdefault(importer, set())
        for imported in imports_of(module):
            target = child_of(folder, imported)
            if target is not None and target != importer:
                edges.add(target)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = lowest[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                lowest[node] = min(lowest[node], lowest[target])
            elif target in stack:
                lowest[node] = min(lowest[node], index[target])
        if lowest[node] == index[node]:
            component = {stack.pop()}
            while node not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def reachable_from(start: str) -> Iterator[tuple[str, str]]:
    """Every source module reachable by imports from the modules under `start`, with the
    module that imports it."""
    queue = [module for module in source_modules() if in_package(module, start)]
    seen = set(queue)
    while queue:
        module = queue.pop()
        for imported in sorted(imports_of(module)):
            if imported not in seen:
                seen.add(imported)
                queue.append(imported)
                yield imported, module


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def layer_of(module: str) -> str | None:
    return next((layer for layer in GATEWAY_LAYERS if in_package(module, layer)), None)


def test_the_walk_reads_every_package_and_resolves_imports() -> None:
    assert {module.split(".")[0] for module in source_modules()} == set(PACKAGES)
    assert "gateway.turn.triage" in imports_of("gateway.turn.dispatcher")
    assert "gateway.logs" in imports_of("gateway.turn.dispatcher")  # `from gateway import logs`


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_modules_and_packages_side_by_side_import_each_other_without_a_cycle() -> None:
    found = {
        folder: cycle for folder in sorted(folders()) for cycle in cycles(folder_graph(folder))
    }
    known = {folder: cycle for folder, (cycle, _why) in KNOWN_CYCLES.items()}
    new = {folder: sorted(cycle) for folder, cycle in found.items() if known.get(folder) != cycle}
    assert new == {}, "imports that go both ways (a shared piece belongs below both)"
    fixed = sorted(folder for folder in known if found.get(folder) != known[folder])
    assert fixed == [], "a known cycle is gone: remove it from KNOWN_CYCLES"


def test_the_layers_import_only_those_below_them() -> None:
    upward = {
        (module, imported)
        for module in source_modules()
        if module.split(".")[0] in LAYERS
        for imported in imports_of(module)
        if not is_below(imported.split(".")[0], module.split(".")[0])
    }
    new = sorted(upward - KNOWN_UPWARD_IMPORTS.keys())
    assert new == [], "an import from below reaches up a layer (move the shared piece down)"
    gone = sorted(KNOWN_UPWARD_IMPORTS.keys() - upward)
    assert gone == [], "a known upward import is gone: remove it from KNOWN_UPWARD_IMPORTS"


def test_the_layer_check_finds_an_upward_import() -> None:
    assert is_below("bus", "config")
    assert is_below("config", "config")
    assert not is_below("channels", "sessions")
    assert not is_below("gateway", "channels")


def is_below(package: str, layer: str) -> bool:
    """Whether a module of `layer` may import `package`: it is `layer` or a layer under it."""
    return package in LAYERS and LAYERS.index(package) <= LAYERS.index(layer)


@pytest.mark.parametrize("layer", GATEWAY_LAYERS)
def test_a_layer_of_gateway_reaches_none_above_it(layer: str) -> None:
    assert any(module.startswith(f"{layer}.") for module in source_modules())
    above = GATEWAY_LAYERS[GATEWAY_LAYERS.index(layer) + 1 :]
    wrong = [
        f"{module} (imported by {importer})"
        for module, importer in reachable_from(layer)
        if layer_of(module) in above
    ]
    assert wrong == []


def test_what_gateway_keeps_beside_its_layers_reaches_none_of_them() -> None:
    shared = [
        module
        for module in source_modules()
        if module.startswith("gateway.") and layer_of(module) is None and module != ENTRY_POINT
    ]
    assert "gateway.services" in shared
    wrong = [
        f"{module} (imported by {importer})"
        for start in shared
        for module, importer in reachable_from(start)
        if layer_of(module) is not None
    ]
    assert wrong == []
