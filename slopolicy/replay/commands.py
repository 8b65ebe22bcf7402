"""What ``slopolicy replay`` does (``slopolicy.cli`` parses): a scenario or
trace, built exactly as ``simulate`` builds it, played live against a target
directly (the ``fcfs`` row: the engine's own queue) and through a Gate with
the scenario's policy (the ``slopolicy`` row, as ``simulate`` names ours),
reported in ``simulate``'s tables and JSON schema, with its claims checked on
the live numbers."""

from __future__ import annotations

import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from rich.console import Console

from slopolicy.errors import UsageError
from slopolicy.replay.calibrate import BATCHES, PROMPTS, Calibration, calibrate, residual_data
from slopolicy.replay.live import LiveReplay, live_comparison, replay_lanes
from slopolicy.replay.progress import StderrProgress
from slopolicy.replay.target import Target
from slopolicy.sim.claims import Claim, overload_claims, seed_claims
from slopolicy.sim.commands import SimulateOptions, build_scenario, check_outputs, write_outputs
from slopolicy.sim.comparison import OURS
from slopolicy.sim.console import make_console, print_claims, print_comparison
from slopolicy.sim.engine_file import write_engine

__all__ = ("LANES", "CalibrateOptions", "ReplayOptions", "calibrate_command", "replay")

#: The lanes a replay can run: ``fcfs`` (direct to the engine) and ``slopolicy`` (gated).
LANES = ("fcfs", OURS)

T = TypeVar("T")


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

    async def body(stop: anyio.Event) -> int:
        return await _replay(options, console, stop)

    return anyio.run(_until_interrupted, body)


async def _replay(options: ReplayOptions, console: Console, stop: anyio.Event) -> int:
    unknown = [lane for lane in options.lanes if lane not in LANES]
    if unknown or not options.lanes:
        raise UsageError(f"--lanes: choose from {', '.join(LANES)}, got {list(options.lanes)}")
    sim = options.workload
    if sim.sweep:
        raise UsageError("a replay compares its lanes; --sweep is for simulate")
    check_outputs(sim.json_path, sim.plot_path)
    scenario = build_scenario(sim)
    async with Target(options.target, api_key=options.api_key) as target:
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
    if which is None or OURS not in runs:
        return ()
    if which == "seed":
        return seed_claims(comparison)
    if "fcfs" not in runs:
        raise UsageError("overload claims need the fcfs lane")
    return overload_claims(comparison)


async def _until_interrupted(body: Callable[[anyio.Event], Awaitable[T]]) -> T:
    """``body(stop)``, with ``stop`` set on the first Ctrl-C (SIGINT) or
    SIGTERM: the replay then stops at once and reports what it has. The
    signals' handlers are back as they were after the first, so a second one
    interrupts as usual."""
    stop = anyio.Event()
    done: list[T] = []
    failed: list[Exception] = []

    async def watch() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
            async for _ in received:
                print("\nstopping: closing every stream...", file=sys.stderr)
                stop.set()
                return

    async with anyio.create_task_group() as group:

        async def run() -> None:
            try:
                done.append(await body(stop))
            except Exception as error:  # raised as is, not in a group
                failed.append(error)
            finally:
                group.cancel_scope.cancel()

        group.start_soon(watch)
        group.start_soon(run)
    if failed:
        raise failed[0]
    return done[0]


@dataclass(frozen=True, slots=True)
class CalibrateOptions:
    """Everything ``slopolicy calibrate`` takes (see its ``--help``)."""

    target: str
    out: str
    prompts: Sequence[int] = PROMPTS
    batches: Sequence[int] = BATCHES
    repeats: int = 5
    decode_tokens: int = 64
    max_num_batched_tokens: int = 2048
    name: str | None = None
    api_key: str = "-"
    ubatch_tokens: int | None = None


def calibrate_command(options: CalibrateOptions, console: Console | None = None) -> int:
    """Probe the target, fit its profile, print the residuals, write the engine file."""
    console = console or make_console()
    check_outputs(options.out, None)

    async def run() -> Calibration:
        async with Target(options.target, api_key=options.api_key) as target:
            return await calibrate(
                target,
                prompts=options.prompts,
                batches=options.batches,
                repeats=options.repeats,
                decode_tokens=options.decode_tokens,
                max_num_batched_tokens=options.max_num_batched_tokens,
                ubatch_tokens=options.ubatch_tokens,
                name=options.name,
            )

    found = anyio.run(run)
    console.print(found.describe(), highlight=False, soft_wrap=True)
    write_engine(options.out, found.engine, [residual_data(r) for r in found.residuals])
    console.print(f"wrote {options.out} (simulate --engine {options.out})")
    return 0
