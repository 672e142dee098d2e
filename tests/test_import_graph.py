"""The package's import graph has no cycles (DESIGN.md: layers, nothing reaches upward).

Every import counts: module level, inside functions (a lazy import only hides a cycle) and under
``TYPE_CHECKING`` (a type that names the engine couples an extension to it all the same). Importing
``a.b.c`` from outside package ``a.b`` also runs ``a/b/__init__.py``, so it depends on that too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import langchain_om

ROOT = Path(langchain_om.__file__).parent
PACKAGE = "langchain_om"


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([PACKAGE, *parts])] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE):
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if not target.startswith(PACKAGE):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield sub if sub in modules else target


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target in _imports(name, path, modules):
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target == name:
                continue
            graph[name].add(target)
            parent = target.rpartition(".")[0]
            while parent and parent != PACKAGE:  # importing a.b.c runs a/b/__init__ unless we are inside a.b
                if not (name == parent or name.startswith(parent + ".")):
                    graph[name].add(parent)
                parent = parent.rpartition(".")[0]
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 40, "the walk found the package's modules"
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


LAYER_RANK = {
    "store": 0,
    "foundation": 1,
    "model_calls": 2,
    "extensions": 3,
    "engine": 4,
    "integrations": 5,
}
"""DESIGN.md's layers, bottom up: a module may import its own layer and those below it. The package
root (public API, import-path shims, ``testing``), ``cli`` and ``eval`` sit on top of everything."""
TOP = 6


def layer_rank(module: str) -> int:
    """The rank of the top-level folder (or root module) ``module`` lives in."""
    parts = module.split(".")
    return LAYER_RANK.get(parts[1], TOP) if len(parts) > 1 else TOP


def test_the_folders_are_the_layers_and_nothing_reaches_upward() -> None:
    graph = import_graph()
    missing = [layer for layer in LAYER_RANK if not (ROOT / layer / "__init__.py").is_file()]
    assert missing == [], "every layer of DESIGN.md is a folder (package) of langchain_om"
    upward = sorted(
        (name, target)
        for name, targets in graph.items()
        for target in targets
        if layer_rank(target) > layer_rank(name)
    )
    assert upward == [], upward


def test_extensions_reach_the_engine_only_through_the_host_interface() -> None:
    graph = import_graph()
    extensions = [name for name in graph if name.startswith(f"{PACKAGE}.extensions")]
    assert len(extensions) > 10, extensions
    for name in extensions:
        assert not any(t.startswith(f"{PACKAGE}.engine") for t in graph[name]), (name, sorted(graph[name]))
    assert any(f"{PACKAGE}.extensions.host" in graph[name] for name in extensions)


def test_the_root_holds_only_the_public_surface() -> None:
    """The flat layout's paths users imported stay as one-line re-exports; nothing else lives there."""
    root = sorted(p.stem for p in ROOT.glob("*.py"))
    assert root == ["__init__", "__main__", "callbacks", "config", "events", "graph", "history", "middleware",
                    "testing", "ui"]
    for stem in set(root) - {"__init__", "__main__", "testing"}:
        assert len((ROOT / f"{stem}.py").read_text(encoding="utf-8").splitlines()) <= 8, stem


def test_no_module_is_longer_than_a_sitting() -> None:
    """DESIGN.md: no module over ~600 lines (the engine's are well under it)."""
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 600}
    assert long == {}, long


# ---- the store's rooms and the integrations' shared turn (issue 42) --------------------------------

BACKEND_PACKAGES = ("sqlite", "postgres", "memory")
SHARED_BACKEND_LAYOUT = {"store", "connection", "schema", "records", "search", "vectors"}
"""The inner layout every server-backed backend package repeats (LangGraph's checkpoint packages
are the model): a reader who knows one backend finds the same concept under the same name."""


def test_each_backend_is_a_package_of_its_own_with_the_same_layout() -> None:
    store = ROOT / "store"
    for backend in BACKEND_PACKAGES:
        assert (store / backend / "__init__.py").is_file(), backend
    for backend in ("sqlite", "postgres"):
        stems = {p.stem for p in (store / backend).glob("*.py")}
        assert SHARED_BACKEND_LAYOUT <= stems, (backend, sorted(SHARED_BACKEND_LAYOUT - stems))
    assert (store / "memory" / "store.py").is_file()


def test_no_module_outside_a_backend_package_is_named_after_a_backend() -> None:
    backend_words = ("sqlite", "postgres", "pg_")
    misplaced = []
    for name in _modules():
        inside = any(name == f"{PACKAGE}.store.{b}" or name.startswith(f"{PACKAGE}.store.{b}.")
                     for b in BACKEND_PACKAGES)
        leaf = name.rpartition(".")[2]
        if not inside and (any(word in leaf for word in backend_words) or
                           (name.startswith(f"{PACKAGE}.store.") and leaf.startswith("memory"))):
            misplaced.append(name)
    assert misplaced == []


def test_the_shared_store_modules_import_no_backend() -> None:
    """The contract and helpers at the store's top stand below every backend: a new backend builds
    on them, and none of them knows one (the package's ``__init__`` re-exports the backends)."""
    graph = import_graph()
    shared = [n for n in graph if n.startswith(f"{PACKAGE}.store.") and n.count(".") == 2
              and n.rpartition(".")[2] not in BACKEND_PACKAGES]
    assert len(shared) >= 8, shared
    for name in shared:
        reached = sorted(t for t in graph[name] if any(t.startswith(f"{PACKAGE}.store.{b}") for b in BACKEND_PACKAGES))
        assert reached == [], (name, reached)


SHARED_INTEGRATION_MODULES = {"turn", "tools", "wire_json", "langsmith_hops"}
"""Integration modules that are shared pieces, not integrations: the checkpoint-aware turn, OM's
tools, the wire's JSON and LangSmith's helpers."""


def test_no_integration_runs_its_step_through_another_integration() -> None:
    graph = import_graph()
    prefix = f"{PACKAGE}.integrations."
    crossing = sorted(
        (name, target) for name, targets in graph.items() if name.startswith(prefix)
        for target in targets
        if target.startswith(prefix) and target.removeprefix(prefix) not in SHARED_INTEGRATION_MODULES
        # RunnableWithObservationalMemory is LangChain's wrapper around the history class itself
        and (name, target) != (f"{prefix}runnable_history", f"{prefix}history")
    )
    assert crossing == []
    for integration in ("graph", "middleware", "history"):
        assert f"{prefix}turn" in graph[f"{prefix}{integration}"], integration


def test_every_kept_import_path_is_listed_once_with_its_removal_version() -> None:
    import importlib
    import re

    listed = langchain_om._OLD_IMPORT_PATHS
    for old, (new, version) in listed.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), old
        def resolve(path: str) -> object:
            module, _, attr = path.rpartition(".")
            try:
                return importlib.import_module(path)
            except ModuleNotFoundError:
                return getattr(importlib.import_module(module), attr)
        old_value, new_value = resolve(old), resolve(new)
        if hasattr(old_value, "__file__"):  # a one-line module re-exporting the new one
            assert all(getattr(old_value, n) is getattr(new_value, n) for n in getattr(new_value, "__all__", []))
        else:
            assert old_value is new_value, old
    root_shims = {p.removeprefix(f"{PACKAGE}.") for p in listed if p.count(".") == 1}
    root = {p.stem for p in ROOT.glob("*.py")}
    assert root - {"__init__", "__main__", "testing"} == root_shims
