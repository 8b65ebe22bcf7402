"""What ``slopolicy replay`` does (``slopolicy.cli`` parses): a scenario or
trace, built exactly as ``simulate`` builds it, played live against a target
directly (the ``fcfs`` row: the engine's own queue) and through a Gate with
the scenario's policy (the ``ours`` row), reported in ``simulate``'s tables
and JSON schema, with its claims checked on the live numbers."""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from rich.console import Console

from slopolicy.errors import UsageError
from slopolicy.replay.live import LiveReplay, live_comparison, replay_lanes
from slopolicy.replay.progress import StderrProgress
from slopolicy.replay.target import Target
from slopolicy.sim.claims import Claim, overload_claims, seed_claims
from slopolicy.sim.commands import SimulateOptions, build_scenario, check_outputs, write_outputs
from slopolicy.sim.console import make_console, print_claims, print_comparison

__all__ = ("LANES", "ReplayOptions", "replay")

#: The lanes a replay can run: ``fcfs`` (direct to the engine) and ``ours`` (gated).
LANES = ("fcfs", "ours")


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """Everything ``slopolicy replay`` takes (see its ``--help``): the
    workload as ``simulate`` reads it, and how to play it.

    Attributes:
        target: the engine's base URL.
        workload: scenario, traces, policy, rate scale, window, claims and
            outputs, exactly as for ``simulate`` (``compare`` is not used).
        lanes: which of :data:`LANES` to run, in order.
        max_concurrency: requests open at once per lane, at most.
        drain: seconds after the workload's end before open requests are stopped.
        api_key: the bearer token the target wants (``-``: none).
    """

    target: str
    workload: SimulateOptions
    lanes: Sequence[str] = LANES
    max_concurrency: int = 256
    drain: float = 600.0
    api_key: str = "-"


def replay(options: ReplayOptions, console: Console | None = None) -> int:
    """Run the replay; 0 when it ran to its end, 130 when interrupted (the
    partial report is printed and written all the same)."""
    console = console or make_console()
    return anyio.run(_replay, options, console)


async def _replay(options: ReplayOptions, console: Console) -> int:
    unknown = [lane for lane in options.lanes if lane not in LANES]
    if unknown or not options.lanes:
        raise UsageError(f"--lanes: choose from {', '.join(LANES)}, got {list(options.lanes)}")
    sim = options.workload
    if sim.sweep:
        raise UsageError("a replay compares its lanes; --sweep is for simulate")
    check_outputs(sim.json_path, sim.plot_path)
    scenario = build_scenario(sim)
    async with Target(options.target, api_key=options.api_key) as target, _interrupts() as stop:
        live = LiveReplay(
            target, scenario, max_concurrency=options.max_concurrency, drain=options.drain
        )
        plan = await live.prepare()
        console.print(
            f"[bold]slopolicy replay[/] of {scenario.description or scenario.workload.name}"
        )
        console.print(live.describe())
        runs = await replay_lanes(
            live,
            plan,
            options.lanes,
            stop=stop,
            progress=StderrProgress if sim.progress else None,
        )
    comparison = live_comparison(live, runs)
    print_comparison(comparison, console)
    console.print(live.fit(runs).describe())
    interrupted = [run.name for run in runs.values() if run.interrupted]
    if interrupted or len(runs) < len(options.lanes):
        console.print(f"[yellow]partial report[/]: stopped early in {interrupted or 'a lane'}")
    print_claims(_claims(sim.claims, comparison, runs), console)
    extra = {"live": live.to_json(runs)}
    write_outputs(
        comparison, None, scenario.description, sim.json_path, sim.plot_path, console, extra
    )
    return 130 if stop.is_set() else 0


def _claims(which: str | None, comparison: Any, runs: Mapping[str, Any]) -> tuple[Claim, ...]:
    if which is None or "ours" not in runs:
        return ()
    if which == "seed":
        return seed_claims(comparison)
    if "fcfs" not in runs:
        raise UsageError("overload claims need the fcfs lane")
    return overload_claims(comparison)


@asynccontextmanager
async def _interrupts() -> AsyncIterator[anyio.Event]:
    """An event set on the first Ctrl-C (SIGINT) or SIGTERM: the replay stops
    at once and reports what it has; a second one interrupts as usual."""
    stop = anyio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            with anyio.open_signal_receiver(*signals) as received:
                async for _ in received:
                    if stop.is_set():
                        raise KeyboardInterrupt
                    print("\nstopping: closing every stream...", file=sys.stderr)
                    stop.set()

        group.start_soon(watch)
        try:
            yield stop
        finally:
            group.cancel_scope.cancel()
