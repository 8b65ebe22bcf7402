"""Scenarios: a workload, an engine model and a policy, loaded from one YAML file.

:func:`load_scenario` reads a scenario file (format in ``docs/simulator.md``),
:func:`builtin_scenario` one shipped with slopolicy (``seed``: the seed
text's incident), and :func:`run_scenario` compares policies on it. Bad
files raise :class:`~slopolicy.errors.SimulationError` listing every bad
field with its dotted path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypedDict

from pydantic import ValidationError

from slopolicy.config import PolicyConfig
from slopolicy.config.loading import load_file, parse_text
from slopolicy.errors import ConfigError, FieldError, SimulationError, UsageError
from slopolicy.sim.comparison import (
    POLICIES,
    CompareProgress,
    Comparison,
    check_workload,
    compare,
)
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.policies import PolicySpec
from slopolicy.sim.scenario_models import ScenarioModel, TraceModel
from slopolicy.sim.simulator import Client
from slopolicy.sim.streams import build_workload
from slopolicy.sim.traces import TraceFormat, azure_2023, read_trace
from slopolicy.sim.workload import Workload

__all__ = (
    "BUILTIN_SCENARIOS",
    "Scenario",
    "builtin_data",
    "builtin_scenario",
    "load_scenario",
    "run_scenario",
    "scenario_from_dict",
    "seed_scenario",
)

#: Scenarios shipped with slopolicy, by name.
BUILTIN_SCENARIOS = ("seed", "azure-2023", "long-prompts", "agents")


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything one comparison needs, as plain values (see :class:`ScenarioModel`
    for each field's meaning)."""

    name: str
    workload: Workload
    engine: EngineSpec
    policy: PolicyConfig
    description: str = ""
    rpm_limit: int = 60
    client: Client = field(default_factory=Client)
    drain_s: float = 3600.0
    signals: tuple[str, ...] = ("kv_usage", "waiting", "running", "kv_capacity_tokens")
    engine_priority: bool = True

    def run_settings(self) -> RunSettings:
        """Its settings as :func:`~slopolicy.sim.comparison.compare` and
        :func:`~slopolicy.sim.sweep.sweep` take them (keyword arguments)."""
        return RunSettings(
            rpm_limit=self.rpm_limit,
            drain=self.drain_s,
            client=self.client,
            signals=self.signals,
            engine_priority=self.engine_priority,
        )


class RunSettings(TypedDict):
    """A scenario's settings of a run (see :meth:`Scenario.run_settings`)."""

    rpm_limit: int
    drain: float
    client: Client
    signals: tuple[str, ...]
    engine_priority: bool


def load_scenario(path: str | Path) -> Scenario:
    """The scenario in a ``.yaml``/``.yml``/``.json``/``.toml`` file; relative
    paths inside it (policy, traces) are relative to the file."""
    path = Path(path)
    try:
        data = load_file(str(path))
    except ConfigError as error:
        raise SimulationError(str(error.errors[0].message), source=str(path)) from error
    return scenario_from_dict(data, base=path.parent, source=str(path))


def builtin_scenario(name: str) -> Scenario:
    """A scenario shipped with slopolicy: one of :data:`BUILTIN_SCENARIOS`."""
    if name not in BUILTIN_SCENARIOS:
        known = ", ".join(BUILTIN_SCENARIOS)
        raise SimulationError(f"unknown built-in scenario {name!r}; they are {known}")
    folder = resources.files("slopolicy.sim") / "scenarios"
    with resources.as_file(folder) as directory:
        return load_scenario(Path(directory) / f"{name}.yaml")


def seed_scenario(*, short: bool = False) -> Scenario:
    """The built-in ``seed`` scenario; ``short`` halves it for quick checks:
    150 s of chat, the contracts at 40 s and 150 summaries at 60 s."""
    data = builtin_data("seed")
    if short:
        data["duration_s"] = 150
        streams = {stream["name"]: stream for stream in data["streams"]}
        streams["contracts"]["arrivals"]["at_s"] = 40
        streams["summaries"]["arrivals"].update(at_s=60, count=150)
        data["name"] = "seed-short"
    return scenario_from_dict(data, source="seed.yaml")


def builtin_data(name: str) -> dict[str, Any]:
    """The parsed YAML of a built-in scenario, to change before
    :func:`scenario_from_dict` (e.g. a shorter version for tests)."""
    text = (resources.files("slopolicy.sim") / "scenarios" / f"{name}.yaml").read_text("utf-8")
    data: dict[str, Any] = parse_text(text, "yaml", name)
    return data


def scenario_from_dict(
    data: Mapping[str, Any], *, base: str | Path | None = None, source: str | None = None
) -> Scenario:
    """A scenario from parsed data; ``base`` is where relative paths start
    (default: the built-in scenarios' folder)."""
    if not isinstance(data, Mapping):
        raise SimulationError("expected a mapping at the top level", source=source)
    try:
        model = ScenarioModel.model_validate(data)
    except ValidationError as error:
        problems = tuple(
            FieldError(".".join(str(p) for p in detail["loc"]), detail["msg"])
            for detail in error.errors(include_url=False)
        )
        raise SimulationError("invalid scenario", source=source, errors=problems) from error
    with resources.as_file(resources.files("slopolicy.sim") / "scenarios") as builtin:
        folder = Path(base) if base is not None else Path(builtin)
        try:
            return _build(model, folder, source)
        except UsageError as error:  # a value the models accept, refused by what it builds
            raise SimulationError(str(error), source=source) from error


def _build(model: ScenarioModel, folder: Path, source: str | None) -> Scenario:
    policy = PolicyConfig()
    if model.policy is not None:
        policy_path = folder / model.policy
        try:
            policy = PolicyConfig.from_file(str(policy_path))
        except ConfigError as error:
            problems = tuple(FieldError(f"policy: {e.path}", e.message) for e in error.errors)
            where = str(policy_path)
            raise SimulationError("invalid policy file", source=where, errors=problems) from error
    workload = _workload(model, folder, source)
    check_workload(workload, policy)
    return Scenario(
        model.name,
        workload,
        model.engine.to_spec(),
        policy,
        model.description,
        model.rpm_limit,
        model.client.build(model.seed),
        model.drain_s,
        tuple(model.signals),
        model.engine_priority,
    )


def _workload(model: ScenarioModel, folder: Path, source: str | None) -> Workload:
    parts: list[Workload] = []
    if model.streams:
        assert model.duration_s is not None
        streams = [stream.build() for stream in model.streams]
        parts.append(
            build_workload(streams, duration=model.duration_s, seed=model.seed, name=model.name)
        )
    parts.extend(_trace(trace, folder) for trace in model.traces)
    if not parts or not any(len(part) for part in parts):
        raise SimulationError("the scenario's workload has no requests", source=source)
    workload = parts[0].merged(*parts[1:], name=model.name) if len(parts) > 1 else parts[0]
    return workload.scaled(model.rate_scale) if model.rate_scale != 1 else workload


def _trace(trace: TraceModel, folder: Path) -> Workload:
    if trace.builtin is not None:
        return azure_2023(max_new_tokens=trace.max_new_tokens, retries=trace.retries)
    assert trace.path is not None
    fmt = None
    if trace.time_col is not None and trace.input_col is not None and trace.output_col is not None:
        fmt = TraceFormat(
            trace.time_col,
            trace.input_col,
            trace.output_col,
            trace.tenant_col,
            trace.lane_col,
            None,
            trace.time_unit,
        )
    path = folder / trace.path
    return read_trace(
        path,
        fmt,
        tenant=trace.tenant or path.stem,
        lane=trace.lane,
        max_new_tokens=trace.max_new_tokens,
        retries=trace.retries,
    )


def run_scenario(
    scenario: Scenario,
    *,
    policies: Sequence[PolicySpec] = POLICIES,
    progress: CompareProgress | None = None,
) -> Comparison:
    """Compare ``policies`` (as :func:`~slopolicy.sim.comparison.compare`
    takes them) on ``scenario`` with its own settings."""
    return compare(
        scenario.workload,
        scenario.policy,
        scenario.engine,
        policies=policies,
        progress=progress,
        **scenario.run_settings(),
    )
