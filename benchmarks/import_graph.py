"""The package's shape, read from its source (no module is run).

Run from the repository root::

    python -m benchmarks.import_graph

Prints the top-level modules of ``slopolicy/core/`` and its wings, the
import arrows inside the core, the import cycles in the whole package
(imports at import time only: those under ``if TYPE_CHECKING:`` and inside
functions never run then), and the modules over 400 lines (STYLE.md rule 16).
``tests/test_layers.py`` asserts on the same graph: the core imports no outer
layer, and there are no cycles.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import slopolicy

__all__ = ("ROOT", "core", "cycles", "graph", "imports", "long_modules", "modules")

ROOT = Path(slopolicy.__file__).parent
#: Lines past which a module is two modules (STYLE.md rule 16).
MAX_LINES = 400


def _module(path: Path, root: Path) -> str:
    parts = ["slopolicy", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    return {_module(path, root): path for path in sorted(root.rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(
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


def graph(*, runtime_only: bool, root: Path = ROOT) -> dict[str, set[str]]:
    """Each module's imports of other modules of the package."""
    found = modules(root)
    known = frozenset(found)
    arrows: dict[str, set[str]] = {}
    for name, path in found.items():
        tree = ast.parse(path.read_text(), str(path))
        arrows[name] = {
            target
            for target in imports(
                tree, name, path.name == "__init__.py", runtime_only=runtime_only, known=known
            )
            if target in found and target != name
        }
    return arrows


def cycles(arrows: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(arrows):
        if start in index:
            continue
        work = [(start, iter(sorted(arrows[start])))]
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
                    work.append((child, iter(sorted(arrows[child]))))
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


def core(name: str) -> bool:
    """Whether the module ``name`` is in ``slopolicy.core``."""
    return name == "slopolicy.core" or name.startswith("slopolicy.core.")


def long_modules(root: Path = ROOT, limit: int = MAX_LINES) -> list[tuple[int, str]]:
    """``(lines, path)`` of each module over ``limit`` lines, longest first."""
    counted = (
        (len(path.read_text().splitlines()), str(path.relative_to(root.parent)))
        for path in root.rglob("*.py")
    )
    return sorted((item for item in counted if item[0] > limit), reverse=True)


def main() -> None:
    folder = ROOT / "core"
    top = sorted(path.name for path in folder.glob("*.py"))
    wings = sorted(
        path.name for path in folder.iterdir() if path.is_dir() and (path / "__init__.py").exists()
    )
    print(f"slopolicy/core/: {len(top)} top-level .py files ({', '.join(top)})")
    print(f"  and {len(wings)} wings: {', '.join(wings)}")
    arrows = graph(runtime_only=True)
    inside = {
        name: {t for t in targets if core(t)} for name, targets in arrows.items() if core(name)
    }
    print(
        f"core: {len(inside)} modules, {sum(map(len, inside.values()))} import arrows inside it"
        " (at import time)"
    )
    found = cycles(arrows)
    print(f"import cycles in the package outside TYPE_CHECKING: {len(found) or 'none'}")
    for component in found:
        print("  " + " <-> ".join(component))
    long = long_modules()
    print(f"modules over {MAX_LINES} lines: {len(long) or 'none'}")
    for lines, path in long:
        print(f"  {lines:5d}  {path}")


if __name__ == "__main__":
    main()
