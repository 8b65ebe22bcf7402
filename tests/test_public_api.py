from __future__ import annotations

import ast
import subprocess
import sys
import types
from pathlib import Path

import pytest

import slopolicy
import slopolicy.config
import slopolicy.core
import slopolicy.core.cost
import slopolicy.core.health
import slopolicy.core.kv
import slopolicy.core.ladder
import slopolicy.core.policy
import slopolicy.core.queueing
import slopolicy.core.quota
import slopolicy.core.routing
import slopolicy.core.slo
import slopolicy.core.tasks
import slopolicy.core.tools
import slopolicy.runtime
import slopolicy.sim
import slopolicy.telemetry

PACKAGE = Path(slopolicy.__file__).parent


@pytest.mark.parametrize(
    "module",
    [
        slopolicy,
        slopolicy.core,
        # each wing of the core: a thin face
        slopolicy.core.cost,
        slopolicy.core.health,
        slopolicy.core.kv,
        slopolicy.core.ladder,
        slopolicy.core.policy,
        slopolicy.core.queueing,
        slopolicy.core.quota,
        slopolicy.core.routing,
        slopolicy.core.slo,
        slopolicy.core.tasks,
        slopolicy.core.tools,
        slopolicy.config,
        slopolicy.runtime,
        slopolicy.sim,
        slopolicy.telemetry,
    ],
)
def test_all_lists_exactly_the_public_names(module: types.ModuleType) -> None:
    for name in module.__all__:  # names loaded lazily resolve, and then appear in vars
        assert getattr(module, name) is not None
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert isinstance(module.__all__, tuple)
    assert len(set(module.__all__)) == len(module.__all__)
    assert set(module.__all__) - {"__version__"} == public


def test_the_api_sketch_names_are_importable() -> None:
    from slopolicy import CostEstimator, LaneRouter, PolicyConfig, Request

    assert all((CostEstimator, LaneRouter, PolicyConfig, Request))
    assert slopolicy.__version__


@pytest.mark.parametrize("module", ["slopolicy.core", "slopolicy"])
def test_importing_the_core_starts_no_async_runtime(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "bad = [m for m in ('anyio', 'asyncio', 'trio') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_runtime_names_load_on_first_use() -> None:
    code = (
        "import sys, slopolicy\n"
        "assert 'Gate' in dir(slopolicy) and 'anyio' not in sys.modules\n"
        "from slopolicy import Gate, Ticket\n"
        "from slopolicy.runtime import Gate as G\n"
        "assert Gate is G and 'anyio' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="Nope"):
        _ = slopolicy.Nope


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize(
    "path",
    sorted((PACKAGE / "core").rglob("*.py")),  # every wing's modules too
    ids=lambda p: str(p.relative_to(PACKAGE / "core")),
)
def test_the_core_imports_only_the_stdlib_tiktoken_and_itself(path: Path) -> None:
    allowed_roots = set(sys.stdlib_module_names) | {"tiktoken"}
    for name in _imports(path):
        root = name.split(".")[0]
        if root == "slopolicy":
            assert name.startswith(("slopolicy.core", "slopolicy.errors")), name
        else:
            assert root in allowed_roots, name
        assert root not in {"asyncio", "anyio", "trio", "time", "threading"}, name
