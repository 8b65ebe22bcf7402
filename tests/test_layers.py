"""The package's layers, read from its import statements (no module is run).

``slopolicy.core`` is the sans-IO centre: it imports nothing from the layers
built on it, anywhere (a function-level import included), and its modules
import one another without cycles (those under ``if TYPE_CHECKING:`` aside:
they never run). The graph and the cycle finder (strongly connected
components by Tarjan's algorithm) are ``benchmarks/import_graph.py``'s, which
prints the same figures.
"""

from __future__ import annotations

import ast

from benchmarks.import_graph import core, cycles, graph, imports

#: Layers the core must not import.
OUTER = ("runtime", "adapters", "backends", "sim", "telemetry", "cli", "testing", "config")


def test_the_core_imports_no_outer_layer() -> None:
    outer = tuple(f"slopolicy.{layer}" for layer in OUTER)
    wrong = {
        f"{name} -> {target}"
        for name, targets in graph(runtime_only=False).items()
        if core(name)
        for target in targets
        if target == "slopolicy" or target.startswith(outer)
    }
    assert not wrong, sorted(wrong)


def test_the_core_has_no_import_cycles() -> None:
    arrows = graph(runtime_only=True)
    inside = {
        name: {t for t in targets if core(t)} for name, targets in arrows.items() if core(name)
    }
    assert cycles(inside) == []


def test_the_package_has_no_import_cycles() -> None:
    # A package's __init__ importing its own modules is not a cycle unless
    # one of them imports the package back; those count like any other.
    assert cycles(graph(runtime_only=True)) == []


def test_the_cycle_finder_finds_cycles() -> None:
    # The check above cannot pass vacuously: a cycle of three is found, a chain is not.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    source = "from . import x, y\nif TYPE_CHECKING:\n    import slopolicy.sim\n"
    tree, known = ast.parse(source), frozenset({"slopolicy.core.x", "slopolicy.sim"})
    found = set(imports(tree, "slopolicy.core", True, runtime_only=True, known=known))
    assert found == {"slopolicy.core", "slopolicy.core.x"}  # y: a name of the package
    found = set(imports(tree, "slopolicy.core.kv", False, runtime_only=True, known=known))
    assert found == {"slopolicy.core", "slopolicy.core.x"}
    found = set(imports(tree, "slopolicy.core", True, runtime_only=False, known=known))
    assert "slopolicy.sim" in found
