"""The package's import graph, read with `ast`: no cycle, and no private name used across modules.

Every `import` and `from ... import` of a module of the package is an edge, of one of three kinds:

- module: runs when the module is imported (top level, a class body, an `if`/`try` at top level);
- local: inside a function, runs when the function is called (how libcst stays out of `check`'s
  start-up: tests/test_speed_readings.py);
- type: under `if TYPE_CHECKING:`, never runs.

A cycle through module-level edges is an error: which module of it Python finishes first depends on
which one was imported first.  A cycle through any edges (a function-local or type-only import
closing it) is one too, unless ALLOWED_CYCLES names it with the reason: such a cycle runs, but the
modules cannot be read (or moved) one without the other.

A private name (`_x`, not a dunder) belongs to its module: `from .other import _x`, or `other._x`
on a module imported whole, from another module of the package is an error.  Tests may still
reach in; the package's own modules may not.

Fast tier, so `make test-fast` and .ci/run (`make test`) run it; the last three tests prove the
checks find what they look for, on small packages written to a temporary folder.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The installed package's layout (pyproject.toml, [tool.setuptools] package-dir): patcher/ is
# `eaglepatch`, codemods/ is `eaglepatch.codemods`.
PACKAGE_DIRS = {"eaglepatch": ROOT / "patcher", "eaglepatch.codemods": ROOT / "codemods"}

# frozenset of the modules of a cycle as the test reports it -> why it may stay. Keep it empty.
ALLOWED_CYCLES: dict[frozenset[str], str] = {}


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported module
    kind: str  # "module" | "local" | "type"
    line: int
    name: str | None  # the name a `from` import takes, or the attribute read on a module imported whole


def package_modules(dirs: dict[str, Path]) -> dict[str, Path]:
    """Dotted module name -> its file, for every .py file of the package."""
    found: dict[str, Path] = {}
    for package, folder in dirs.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            name = ".".join([package, *parts[:-1]] if parts[-1] == "__init__" else [package, *parts])
            owner = max((p for p in dirs if name == p or name.startswith(p + ".")), key=len)
            if owner == package:  # a folder that is another package's (codemods/ under patcher/, if linked)
                found[name] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def module_edges(name: str, path: Path, modules: dict[str, Path]) -> list[Edge]:
    """Every import of a module of the package in `name`, and every private attribute read on one."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    edges: list[Edge] = []
    whole: dict[str, str] = {}  # local name -> module of the package it is bound to (`import x as m`, `from . import x`)

    def absolute(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = package[: len(package) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for statement in child.body:
                    visit_one(statement, "type")
                for statement in child.orelse:
                    visit_one(statement, kind)
                continue
            visit_one(child, kind)

    def visit_one(node: ast.AST, kind: str) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    edges.append(Edge(name, alias.name, kind, node.lineno, None))
                    if alias.asname:
                        whole[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            module = absolute(node)
            if module in modules:
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    if sub in modules:
                        edges.append(Edge(name, sub, kind, node.lineno, None))
                        whole[alias.asname or alias.name] = sub
                    else:
                        edges.append(Edge(name, module, kind, node.lineno, alias.name))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in whole:
            edges.append(Edge(name, whole[node.value.id], kind, node.lineno, node.attr))
        inner = "local" if kind == "module" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else kind
        visit(node, inner)

    visit(tree, "module")
    return edges


def import_graph(dirs: dict[str, Path]) -> tuple[dict[str, Path], list[Edge]]:
    modules = package_modules(dirs)
    edges = [edge for name, path in modules.items() for edge in module_edges(name, path, modules) if edge.target != edge.source]
    return modules, edges


def cycles(modules: dict[str, Path], edges: list[Edge], kinds: set[str]) -> list[list[Edge]]:
    """One cycle (its edges, in order) for each strongly connected component of more than one module
    in the graph of the edges of `kinds` (Tarjan's algorithm, iterative)."""
    graph: dict[str, dict[str, Edge]] = {name: {} for name in modules}
    for edge in edges:
        if edge.kind in kinds and edge.target in graph:
            graph[edge.source].setdefault(edge.target, edge)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return [_cycle_in(component, graph) for component in components]


def _cycle_in(component: list[str], graph: dict[str, dict[str, Edge]]) -> list[Edge]:
    """A shortest cycle through the component's first module (breadth first, inside the component)."""
    members = set(component)
    start = component[0]
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target, edge in sorted(graph[node].items()):
                if target == start:
                    path = [edge]
                    while path[0].source != start:
                        path.insert(0, came[path[0].source])
                    return path
                if target in members and target not in came:
                    came[target] = edge
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle in component {component}")  # pragma: no cover - Tarjan gave it


def describe(cycle: list[Edge], modules: dict[str, Path]) -> str:
    steps = [f"{e.source} -> {e.target} ({modules[e.source].relative_to(ROOT) if modules[e.source].is_relative_to(ROOT) else modules[e.source]}:{e.line}, {e.kind})" for e in cycle]
    return "cycle: " + "; ".join(steps)


def private_imports(modules: dict[str, Path], edges: list[Edge]) -> list[str]:
    """`from other import _x` or `other._x` across modules of the package, one line each."""
    found = []
    for edge in edges:
        name = edge.name
        if name is None or not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        where = modules[edge.source]
        where_text = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
        found.append(f"{where_text}:{edge.line}: {edge.source} uses {edge.target}.{name}")
    return sorted(set(found))


# --------------------------------------------------------------------------- the package


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, Path], list[Edge]]:
    return import_graph(PACKAGE_DIRS)


def test_the_graph_sees_the_whole_package(graph):
    modules, edges = graph
    assert {"eaglepatch.cli", "eaglepatch.engines.sglang.pipeline", "eaglepatch.engine", "eaglepatch.records", "eaglepatch.codemods.add_delegations"} <= set(modules)
    assert {"module", "local", "type"} <= {edge.kind for edge in edges}


def test_no_import_cycle_through_module_level_imports(graph):
    modules, edges = graph
    found = [describe(cycle, modules) for cycle in cycles(modules, edges, {"module"})]
    assert not found, "module-level import cycles:\n" + "\n".join(found)


def test_no_import_cycle_through_any_import(graph):
    """Function-local and TYPE_CHECKING imports count too: a cycle they close is one Python tolerates
    but the modules are still one knot. ALLOWED_CYCLES lists the ones kept on purpose, with why."""
    modules, edges = graph
    found = cycles(modules, edges, {"module", "local", "type"})
    unexplained = [describe(cycle, modules) for cycle in found if frozenset(e.source for e in cycle) not in ALLOWED_CYCLES]
    assert not unexplained, "import cycles (through any import: module-level, function-local or TYPE_CHECKING):\n" + "\n".join(unexplained)
    stale = set(ALLOWED_CYCLES) - {frozenset(e.source for e in cycle) for cycle in found}
    assert not stale, f"ALLOWED_CYCLES names cycles that are gone: {sorted(map(sorted, stale))}"


def test_no_private_name_is_used_across_modules(graph):
    modules, edges = graph
    found = private_imports(modules, edges)
    assert not found, "private names used from another module (make them public, or move them):\n" + "\n".join(found)


# --------------------------------------------------------------------------- the checks themselves


def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    top = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(text)
    return {"pkg": top}


def test_a_cycle_is_found_and_named(tmp_path):
    dirs = _package(tmp_path, {"a.py": "from .b import f\n", "b.py": "from . import c\n", "c.py": "def g():\n    from .a import h\n"})
    modules, edges = import_graph(dirs)
    assert cycles(modules, edges, {"module"}) == []
    [cycle] = cycles(modules, edges, {"module", "local", "type"})
    assert [(e.source, e.target, e.kind) for e in cycle] == [("pkg.a", "pkg.b", "module"), ("pkg.b", "pkg.c", "module"), ("pkg.c", "pkg.a", "local")]
    assert "pkg.c -> pkg.a" in describe(cycle, modules)


def test_a_module_level_cycle_and_a_type_only_one_are_found(tmp_path):
    dirs = _package(
        tmp_path,
        {
            "a.py": "import pkg.b\n",
            "b.py": "from pkg import a\n",
            "sub/__init__.py": "",
            "sub/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import T\nfrom .y import z\n",
            "sub/y.py": "from .x import w\n",
        },
    )
    modules, edges = import_graph(dirs)
    assert [sorted(e.source for e in c) for c in cycles(modules, edges, {"module"})] == [["pkg.a", "pkg.b"], ["pkg.sub.x", "pkg.sub.y"]]
    assert any(e.kind == "type" and e.target == "pkg.a" for e in edges)


def test_private_names_across_modules_are_found(tmp_path):
    dirs = _package(
        tmp_path,
        {
            "a.py": "def _helper(): ...\n_TABLE = {}\ndef public(): return _helper()\n",
            "b.py": "from .a import _helper, public\nfrom . import a\nx = a._TABLE\nimport pkg.a as m\ny = m.__name__\n",
            "c.py": "def f():\n    from .a import _TABLE\n",
        },
    )
    modules, edges = import_graph(dirs)
    assert [line.split(": ", 1)[1] for line in private_imports(modules, edges)] == [
        "pkg.b uses pkg.a._helper",
        "pkg.b uses pkg.a._TABLE",
        "pkg.c uses pkg.a._TABLE",
    ]


# --------------------------------------------------------------------------- engine names

# The engines the package serves. Outside the engine packages code asks the engine object what it
# needs (its display name, what it supports); a string naming an engine compared there is one more
# place a third engine, or a second axis (the speculative algorithm), has to be threaded through.
ENGINE_NAMES = frozenset({"sglang", "vllm"})
ENGINE_PACKAGES = ("eaglepatch.engines",)


def _names_an_engine(node: ast.expr) -> bool:
    """A string constant naming an engine (any case), a name or attribute spelled so (`Engine.vllm`),
    or a tuple/list/set of them (`x in ("sglang", "vllm")`)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.lower() in ENGINE_NAMES
    if isinstance(node, ast.Name):
        return node.id.lower() in ENGINE_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr.lower() in ENGINE_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_an_engine(e) for e in node.elts)
    return False


def engine_switches(path: Path) -> list[tuple[int, str]]:
    """(line, what) for each place `path` decides by an engine's name: a comparison (`==`, `!=`, `in`,
    `is`) with one, a `case` of one, a dict literal keyed by one, a subscript by one. A string
    that only mentions an engine (a docstring, a message, `"sglang.srt"`) is none of these."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_names_an_engine(o) for o in (node.left, *node.comparators)):
            found.append((node.lineno, f"compares with an engine's name: {ast.unparse(node)}"))
        elif isinstance(node, ast.MatchValue) and _names_an_engine(node.value):
            found.append((node.lineno, f"a case of an engine's name: {ast.unparse(node.value)}"))
        elif isinstance(node, ast.Dict) and any(k is not None and _names_an_engine(k) for k in node.keys):
            found.append((node.lineno, "a dict keyed by engine names"))
        elif isinstance(node, ast.Subscript) and _names_an_engine(node.slice) and isinstance(node.slice, ast.Constant):
            found.append((node.lineno, f"looks up by an engine's name: {ast.unparse(node)}"))
    return sorted(found)


def engine_name_checks(modules: dict[str, Path], engine_packages: tuple[str, ...] = ENGINE_PACKAGES) -> list[str]:
    found = []
    for name, path in sorted(modules.items()):
        if any(name == p or name.startswith(p + ".") for p in engine_packages):
            continue
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        found += [f"{shown}:{line}: {what}" for line, what in engine_switches(path)]
    return found


def test_no_engine_name_is_compared_outside_the_engine_packages(graph):
    """cli picks the engine once; everything after asks it (engine.py: supports, display_name, ...)."""
    modules, _ = graph
    found = engine_name_checks(modules)
    assert not found, "engine names decided on outside patcher/engines/ (ask the engine object instead):\n" + "\n".join(found)


def test_the_guard_knows_every_engine():
    from eaglepatch.engines import ENGINES

    assert {engine.name for engine in ENGINES} <= ENGINE_NAMES


def test_engine_name_checks_are_found_and_mentions_are_not(tmp_path):
    dirs = _package(
        tmp_path,
        {
            "a.py": (
                '"""Reads sglang and vllm trees."""\n'
                'def f(tree):\n'
                '    if tree.engine == "vllm":\n'
                '        return 1\n'
                '    label = "vLLM" if tree.kind != "SGLang" else "x"\n'
                '    ok = tree.engine in ("sglang", "other")\n'
                '    same = tree.engine is Engine.vllm\n'
                '    table = {"sglang": 1, "vllm": 2}[tree.engine]\n'
                '    by = HINTS["vllm"]\n'
                '    match tree.engine:\n'
                '        case "sglang":\n'
                '            pass\n'
                '    raise ValueError(f"not a vllm tree: {tree}")\n'
            ),
            "b.py": 'PACKAGE = "sglang.srt"\nparts = ["sglang", "srt"]\nmessage = "explain does not read vLLM trees"\nx = a == "sglang.srt"\n',
            "engines/__init__.py": 'def pick(name):\n    return name == "vllm"\n',
        },
    )
    found = engine_name_checks(package_modules(dirs), ("pkg.engines",))
    assert [line.split(":")[1] for line in found] == ["3", "5", "6", "7", "8", "9", "11"]
    assert all(line.split(":")[0].endswith("a.py") for line in found)
