"""What ``slopolicy demo`` and ``slopolicy simulate`` do (``slopolicy.cli`` parses):
compare policies on a scenario, or sweep their capacity (``--sweep``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from slopolicy.config import PolicyConfig
from slopolicy.errors import SimulationError, UsageError
from slopolicy.sim.baselines import BASELINES
from slopolicy.sim.capacity import REFINE
from slopolicy.sim.claims import Claim, overload_claims, seed_claims
from slopolicy.sim.comparison import OURS, Comparison
from slopolicy.sim.console import (
    make_console,
    print_claims,
    print_comparison,
    print_sweep,
    progress_bar,
)
from slopolicy.sim.engine_file import resolve_engine
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.export import sweep_to_json, to_json
from slopolicy.sim.offered_load import Load, load_outside_bursts
from slopolicy.sim.policies import resolve_all
from slopolicy.sim.profiles import profile
from slopolicy.sim.scenario import (
    BUILTIN_SCENARIOS,
    Scenario,
    builtin_scenario,
    load_scenario,
    run_scenario,
    seed_scenario,
)
from slopolicy.sim.sweep import Sweep, sweep
from slopolicy.sim.traces import TimeUnit, TraceFormat, azure_2023, read_traces
from slopolicy.sim.workload import Workload

__all__ = (
    "SimulateOptions",
    "TraceOptions",
    "build_scenario",
    "check_outputs",
    "demo",
    "simulate",
    "write_outputs",
)


def demo(
    *,
    quick: bool = False,
    json_path: str | None = None,
    plot_path: str | None = None,
    progress: bool = True,
    console: Console | None = None,
    engine: str | None = None,
) -> int:
    """Run the seed scenario under every policy and print the comparison;
    ``engine``: an engine file or a built-in profile instead of the scenario's."""
    console = console or make_console()
    check_outputs(json_path, plot_path)
    scenario = seed_scenario(short=quick)
    scenario = dataclasses.replace(scenario, engine=_with_engine(scenario.engine, engine))
    console.print(f"[bold]slopolicy demo[/]: {scenario.description}")
    comparison, load = _run(scenario, (OURS, *BASELINES), progress, console)
    print_comparison(comparison, console, load=load)
    print_claims(seed_claims(comparison), console)
    write_outputs(comparison, load, scenario.description, json_path, plot_path, console)
    return 0


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """How to read ``--trace`` files (``None``: recognise the format)."""

    time_col: str | None = None
    input_col: str | None = None
    output_col: str | None = None
    tenant_col: str | None = None
    lane_col: str | None = None
    time_unit: TimeUnit = "s"
    tenant: str | None = None
    lane: str | None = None
    max_new_tokens: int = 1024
    retries: int = 0

    def format(self) -> TraceFormat | None:
        time, given, output = self.time_col, self.input_col, self.output_col
        columns = (time, given, output, self.tenant_col, self.lane_col)
        if all(c is None for c in columns):
            return None
        if time is None or given is None or output is None:
            raise SimulationError(
                "give --time-col, --input-col and --output-col together", source="--trace"
            )
        return TraceFormat(
            time,
            given,
            output,
            self.tenant_col,
            self.lane_col,
            None,
            self.time_unit,
        )


@dataclass(frozen=True, slots=True)
class SimulateOptions:
    """Everything ``slopolicy simulate`` takes (see its ``--help``)."""

    scenario: str | None = None
    traces: Sequence[str] = ()
    trace: TraceOptions = TraceOptions()
    policy: str | None = None
    compare: Sequence[str] = BASELINES
    rate_scale: float = 1.0
    duration: float | None = None
    engine: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    long_prefill_token_threshold: int | None = None
    rpm_limit: int | None = None
    claims: str | None = None
    json_path: str | None = None
    plot_path: str | None = None
    progress: bool = True
    sweep: bool = False
    sweep_target: float = 0.9
    sweep_refine: int = REFINE


def simulate(options: SimulateOptions, console: Console | None = None) -> int:
    """Build the scenario the options describe, compare (or sweep), print and write."""
    console = console or make_console()
    if options.claims == "overload" and "fcfs" not in options.compare:
        raise SimulationError("overload claims need fcfs in --compare", source="--claims")
    if options.sweep and options.claims is not None:
        raise SimulationError("claims are checked on a comparison, not a sweep", source="--claims")
    check_outputs(options.json_path, options.plot_path)
    scenario = build_scenario(options)
    policies = (OURS, *options.compare)
    try:
        names = [f.name for f in resolve_all(policies, scenario.policy)]
    except UsageError as error:
        raise SimulationError(str(error), source="--compare") from error
    if options.sweep:
        return _sweep(scenario, policies, options, console)
    comparison, load = _run(scenario, policies, options.progress, console, names)
    print_comparison(comparison, console, load=load)
    claims: tuple[Claim, ...] = ()
    if options.claims == "seed":
        claims = seed_claims(comparison)
    elif options.claims == "overload":
        claims = overload_claims(comparison)
    print_claims(claims, console)
    write_outputs(
        comparison, load, scenario.description, options.json_path, options.plot_path, console
    )
    return 0


def _sweep(
    scenario: Scenario, policies: Sequence[str], options: SimulateOptions, console: Console
) -> int:
    if not 0 < options.sweep_target <= 1 or options.sweep_refine < 0:
        raise SimulationError("--sweep-target must be in (0, 1] and --sweep-refine >= 0")

    def run(tell: Callable[[str, float, float], None] | None) -> Sweep:
        return sweep(
            scenario.workload,
            scenario.policy,
            scenario.engine,
            policies=policies,
            target=options.sweep_target,
            refine=options.sweep_refine,
            progress=tell,
            **scenario.run_settings(),
        )

    if options.progress:
        with console.status("sweeping") as status:
            found = run(lambda n, s, a: status.update(f"sweeping: {n} at {s:.3g}x, {a:.1%}"))
    else:
        found = run(None)
    print_sweep(found, console)
    if options.json_path is not None:
        text = json.dumps(sweep_to_json(found), indent=2) + "\n"
        Path(options.json_path).write_text(text, encoding="utf-8")
        console.print(f"wrote {options.json_path}")
    if options.plot_path is not None:
        from slopolicy.sim.plot import plot_sweep

        plot_sweep(found, options.plot_path)
        console.print(f"wrote {options.plot_path}")
    return 0


def build_scenario(options: SimulateOptions) -> Scenario:
    """The scenario ``options`` describe: a file, a built-in or traces, with the
    policy, rate scale, window and engine options applied."""
    if options.scenario is None and not options.traces:
        raise SimulationError("give a scenario file, a built-in scenario or --trace")
    if options.scenario is None:
        scenario = _trace_scenario(options)
    elif Path(options.scenario).exists():
        scenario = load_scenario(options.scenario)
    elif options.scenario in BUILTIN_SCENARIOS:
        scenario = builtin_scenario(options.scenario)
    else:
        raise SimulationError(
            f"no such scenario file or built-in scenario; the built-ins are "
            f"{', '.join(BUILTIN_SCENARIOS)}",
            source=options.scenario,
        )
    if options.traces and options.scenario is not None:
        scenario = dataclasses.replace(scenario, workload=_traces(options))
    if options.policy is not None:
        scenario = dataclasses.replace(scenario, policy=PolicyConfig.from_file(options.policy))
    workload = scenario.workload
    if options.rate_scale != 1:
        try:
            workload = workload.scaled(options.rate_scale)
        except UsageError as error:  # a scale that stretches arrivals past MAX_ARRIVAL
            raise SimulationError(str(error), source="--rate-scale") from error
    if options.duration is not None:
        workload = workload.window(0.0, options.duration)
    rpm = options.rpm_limit or scenario.rpm_limit
    return dataclasses.replace(
        scenario, workload=workload, engine=_engine(scenario.engine, options), rpm_limit=rpm
    )


def _trace_scenario(options: SimulateOptions) -> Scenario:
    workload = _traces(options)
    if list(options.traces) == ["azure-2023"]:
        # The built-in scenario's engine, policy and settings, at the trace's own rate.
        return dataclasses.replace(builtin_scenario("azure-2023"), workload=workload)
    return Scenario(workload.name, workload, EngineSpec(profile("llama3-8b/h100")), PolicyConfig())


def _traces(options: SimulateOptions) -> Workload:
    trace = options.trace
    if list(options.traces) == ["azure-2023"]:
        return azure_2023(max_new_tokens=trace.max_new_tokens, retries=trace.retries)
    if "azure-2023" in options.traces:
        raise SimulationError("azure-2023 cannot be mixed with trace files", source="--trace")
    return read_traces(
        list(options.traces),
        trace.format(),
        tenant=trace.tenant,
        lane=trace.lane,
        max_new_tokens=trace.max_new_tokens,
        retries=trace.retries,
    )


def _with_engine(spec: EngineSpec, engine: str | None) -> EngineSpec:
    """``spec`` with ``--engine``: an engine file's whole engine, or a built-in profile."""
    if engine is None:
        return spec
    try:
        found = resolve_engine(engine)
    except UsageError as error:
        raise SimulationError(str(error), source="--engine") from error
    return found if isinstance(found, EngineSpec) else dataclasses.replace(spec, profile=found)


def _engine(spec: EngineSpec, options: SimulateOptions) -> EngineSpec:
    spec = _with_engine(spec, options.engine)
    changes: dict[str, object] = {}
    for name in ("max_num_seqs", "max_num_batched_tokens", "long_prefill_token_threshold"):
        value = getattr(options, name)
        if value is not None:
            changes[name] = value
    try:
        return dataclasses.replace(spec, **changes)  # type: ignore[arg-type]
    except UsageError as error:
        raise SimulationError(str(error), source="engine options") from error


def _run(
    scenario: Scenario,
    policies: Sequence[str],
    progress: bool,
    console: Console,
    names: Sequence[str] | None = None,
) -> tuple[Comparison, Load | None]:
    """Compare ``policies``; ``names`` are their names in reports (default: the specs)."""
    load = None
    if scenario.workload.bursts:
        load = load_outside_bursts(scenario.workload, scenario.engine)
    if not progress:
        return run_scenario(scenario, policies=policies), load
    with progress_bar(console, names or policies) as advance:
        return run_scenario(scenario, policies=policies, progress=advance), load


def write_outputs(
    comparison: Comparison,
    load: Load | None,
    description: str,
    json_path: str | None,
    plot_path: str | None,
    console: Console,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Write the comparison's JSON report (``extra``: more top-level keys) and plots."""
    if json_path is not None:
        data = {**to_json(comparison, load=load, description=description), **(extra or {})}
        with _writing(json_path):
            Path(json_path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        console.print(f"wrote {json_path}")
    if plot_path is not None:
        from slopolicy.sim.plot import plot_comparison

        with _writing(plot_path):
            plot_comparison(comparison, plot_path)
        console.print(f"wrote {plot_path}")


def check_outputs(json_path: str | None, plot_path: str | None) -> None:
    """Refuse output paths that cannot be written before a run, not after it."""
    for path in (json_path, plot_path):
        if path is None:
            continue
        target = Path(path)
        if target.is_dir():
            raise SimulationError("is a directory", source=path)
        if not target.parent.is_dir():
            raise SimulationError(f"no such directory {str(target.parent)!r}", source=path)
    if plot_path is not None:
        from slopolicy.sim.plot import check_plot_path

        check_plot_path(plot_path)


@contextlib.contextmanager
def _writing(path: str) -> Iterator[None]:
    """An output that fails to write (permissions, a full disk) as one clear error."""
    try:
        yield
    except OSError as error:
        raise SimulationError(f"cannot write: {error.strerror or error}", source=path) from error
