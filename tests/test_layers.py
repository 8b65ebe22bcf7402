"""The package's layers, read from its import statements (no module is run).

``slopolicy.core`` is the sans-IO centre: it imports nothing from the layers
built on it, anywhere (a function-level import included), and its modules
import one another without cycles (those under ``if TYPE_CHECKING:`` aside:
they never run). Strongly connected components by Tarjan's algorithm.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import slopolicy

ROOT = Path(slopolicy.__file__).parent
#: Layers the core must not import.
OUTER = ("runtime", "adapters", "backends", "sim", "telemetry", "cli", "testing", "config")


def _module(path: Path) -> str:
    parts = ["slopolicy", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module(path): path for path in sorted(ROOT.rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    tree: ast.AST, module: str, package: bool, *, runtime_only: bool, known: frozenset[str]
) -> Iterator[str]:
    """Modules the code of ``module`` (a ``package``'s ``__init__``, or not)
    imports; ``runtime_only``: at import time, outside ``if TYPE_CHECKING:``
    blocks and function bodies. ``from a import b`` of a module ``b`` (one of
    ``known``) is an arrow to ``a.b`` alone: a package's ``__init__`` loading
    on the way is no dependency of the importer."""
    here = module if package else module.rpartition(".")[0]
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if runtime_only and (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            or (isinstance(node, ast.If) and _type_checking(node))
        ):
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names]
            yield from (name for name in names if name in known)
            if any(name not in known for name in names):
                yield base
        stack.extend(ast.iter_child_nodes(node))


def _graph(*, runtime_only: bool) -> dict[str, set[str]]:
    modules = _modules()
    known = frozenset(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = {
            target
            for target in _imports(
                tree, name, path.name == "__init__.py", runtime_only=runtime_only, known=known
            )
            if target in modules and target != name
        }
    return graph


def _cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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
    return found


def _core(name: str) -> bool:
    return name == "slopolicy.core" or name.startswith("slopolicy.core.")


def test_the_core_imports_no_outer_layer() -> None:
    outer = tuple(f"slopolicy.{layer}" for layer in OUTER)
    wrong = {
        f"{name} -> {target}"
        for name, targets in _graph(runtime_only=False).items()
        if _core(name)
        for target in targets
        if target == "slopolicy" or target.startswith(outer)
    }
    assert not wrong, sorted(wrong)


def test_the_core_has_no_import_cycles() -> None:
    graph = _graph(runtime_only=True)
    core = {
        name: {t for t in targets if _core(t)} for name, targets in graph.items() if _core(name)
    }
    assert _cycles(core) == []


def test_the_package_has_no_import_cycles() -> None:
    # A package's __init__ importing its own modules is not a cycle unless
    # one of them imports the package back; those count like any other.
    assert _cycles(_graph(runtime_only=True)) == []


def test_the_cycle_finder_finds_cycles() -> None:
    # The check above cannot pass vacuously: a cycle of three is found, a chain is not.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    source = "from . import x, y\nif TYPE_CHECKING:\n    import slopolicy.sim\n"
    tree, known = ast.parse(source), frozenset({"slopolicy.core.x", "slopolicy.sim"})
    found = set(_imports(tree, "slopolicy.core", True, runtime_only=True, known=known))
    assert found == {"slopolicy.core", "slopolicy.core.x"}  # y: a name of the package
    found = set(_imports(tree, "slopolicy.core.kv", False, runtime_only=True, known=known))
    assert found == {"slopolicy.core", "slopolicy.core.x"}
    found = set(_imports(tree, "slopolicy.core", True, runtime_only=False, known=known))
    assert "slopolicy.sim" in found
