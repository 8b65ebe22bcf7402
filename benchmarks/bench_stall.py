"""The worst event-loop stall one request causes, whatever its size.

Run from the repository root::

    python -m benchmarks.bench_stall            # about a minute
    python -m benchmarks.bench_stall --quick    # 3 repeats

A ticker task sleeps 1 ms at a time beside a Gate on one event loop. Each case
builds one request, as a gateway handler would from the JSON it parsed
(messages as dicts), then admits it (``async with gate.admit(...)``, released
at once; a refusal is caught). The stall of a phase is the longest gap between
two ticks around it, less the 1 ms tick: the time every other task on the loop
waited for it. On a shared machine that wall time also holds the time the OS
gave other processes, so each gap's CPU time (the loop thread's, from
``time.thread_time``) is reported too: what the loop itself was busy with,
the stall on a machine of its own. Cases: a 10 MB prompt, a 1M-emoji prompt, a 10 MB message role,
a 10 MB name, 100,000 tiny messages, huge numeric fields; and no request at
all, the ticker's own jitter. The Gate counts with tiktoken's ``cl100k_base``
and logs every ending (``on_end``), so refusals take the logging path too.
Figures are medians over repeats, on asyncio and trio.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from benchmarks.corpora import corpus
from slopolicy import Gate, InvalidRequest, Policy, PolicyConfig, Rejected, Request
from slopolicy.core.cost.tokens import TiktokenCounter, TokenCounter

__all__ = ("TICK", "Case", "Gap", "Stall", "cases", "measure", "stall_gate", "table")

#: The ticker's period, in seconds.
TICK = 0.001
#: The big texts' size in characters, as the issue measured them.
FULL_CHARS = 10_000_000


@dataclass(frozen=True, slots=True)
class Case:
    """A request to build (``None``: no request, the ticker's own jitter)."""

    name: str
    build: Callable[[], Request] | None


@dataclass(frozen=True, slots=True)
class Gap:
    """The longest gap between two ticks around a phase, less a tick, in
    seconds: its wall time, and the CPU time the loop's thread spent in it."""

    wall: float
    cpu: float


@dataclass(frozen=True, slots=True)
class Stall:
    """The worst gaps of one run of a case, building the request and
    admitting it, and its outcome: ``admitted``, ``refused:<code>``,
    ``invalid:<field>``, or ``-`` for no request."""

    build: Gap
    admit: Gap
    outcome: str


def cases(chars: int = FULL_CHARS) -> list[Case]:
    """The cases, their texts ``chars`` characters long: 1M emoji and 100,000
    messages at the full 10 MB, proportionally fewer below."""
    prose = corpus("prose")
    big = (prose * (chars // len(prose) + 1))[:chars]
    emoji = "\N{GRINNING FACE}" * (chars // 10)
    tiny = max(chars // 100, 1)

    def chat() -> Request:
        return _chat(
            *({"role": ("user", "assistant")[k % 2], "content": "ok"} for k in range(tiny))
        )

    huge = 10**300  # beyond any KV capacity, within a float
    size = f"{chars / 1e6:g} MB"
    return [
        Case("no request (ticker jitter)", None),
        Case(f"{size} prompt", lambda: Request(prompt=big)),
        Case(f"{len(emoji):,}-emoji prompt", lambda: Request(prompt=emoji)),
        Case(f"{size} role", lambda: _chat({"role": big, "content": "hi"})),
        Case(f"{size} name", lambda: _chat({"role": "user", "content": "hi", "name": big})),
        Case(f"{tiny:,} tiny messages", chat),
        Case(
            "huge numeric fields",
            lambda: Request(prompt_tokens=huge, max_new_tokens=huge, tool_risk=1.0, deadline=1e300),
        ),
    ]


def _chat(*turns: dict[str, str]) -> Request:
    return Request(messages=turns)  # type: ignore[arg-type]  # dicts, as a gateway parsed them


def stall_gate(counter: TokenCounter) -> Gate:
    """A Gate that admits every case it can: one lane without a prompt cap, KV
    for 16M tokens, no quota (the default tier has none), every ending logged."""
    config = PolicyConfig.from_dict(
        {
            "lanes": [{"name": "any", "queue_capacity": 16, "max_queue_wait_s": 60.0}],
            "kv": {"num_blocks": 1_000_000, "block_size": 16},
            "engine": {"max_running": 4},
            "ladder": {"enabled": False},
        }
    )
    return Gate(Policy(config, counter=counter), on_end=lambda record: None)


class _Ticker:
    """Records the wall and thread CPU time of each tick; :meth:`next` waits
    for the next one."""

    def __init__(self) -> None:
        self.walls: list[float] = []
        self.cpus: list[float] = []
        self._tick = anyio.Event()

    async def run(self) -> None:
        while True:
            self.walls.append(time.perf_counter())
            self.cpus.append(time.thread_time())
            self._tick.set()
            self._tick = anyio.Event()
            await anyio.sleep(TICK)

    async def next(self) -> None:
        await self._tick.wait()

    def worst(self, start: float, end: float) -> Gap:
        """The longest gaps, by wall and by CPU time, between the ticks from
        the last one before ``start`` to the first one after ``end``."""
        first = bisect.bisect_right(self.walls, start) - 1
        last = bisect.bisect_left(self.walls, end)
        walls, cpus = self.walls[first : last + 1], self.cpus[first : last + 1]
        wall = max(b - a for a, b in itertools.pairwise(walls))
        cpu = max(b - a for a, b in itertools.pairwise(cpus))
        return Gap(max(wall - TICK, 0.0), cpu)


async def _phase(ticker: _Ticker, work: Callable[[], Awaitable[None]]) -> Gap:
    await ticker.next()  # start just after a tick
    start = time.perf_counter()
    await work()
    end = time.perf_counter()
    await ticker.next()
    await ticker.next()  # a tick after the end, whatever the work left pending
    return ticker.worst(start, end)


async def _run(gate: Gate, ticker: _Ticker, case: Case) -> Stall:
    built: list[Request] = []
    outcome = "admitted"

    async def build() -> None:
        nonlocal outcome
        if case.build is None:
            return
        try:
            built.append(case.build())
        except InvalidRequest as error:
            outcome = f"invalid:{error.field}"

    async def admit() -> None:
        nonlocal outcome
        if not built:
            outcome = "-" if case.build is None else outcome
            return
        try:
            async with gate.admit(built[0]):
                pass
        except Rejected as refusal:
            outcome = f"refused:{refusal.code}"

    build_stall = await _phase(ticker, build)
    admit_stall = await _phase(ticker, admit)
    return Stall(build_stall, admit_stall, outcome)


async def measure(
    selected: list[Case], repeats: int, counter: TokenCounter | None = None
) -> dict[str, list[Stall]]:
    """Each case ``repeats`` times in a row beside the ticker, through a gate
    of its own, on the running backend: its stalls per run, by case name.

    A case's runs share a gate so that each pays for what its predecessor
    left behind (the policy's deadline index keeps a finished entry, and its
    request, until it is next pruned: freeing 100,000 messages then takes
    milliseconds), and no case pays for another's."""
    counter = counter if counter is not None else TiktokenCounter()
    ticker = _Ticker()
    results: dict[str, list[Stall]] = {case.name: [] for case in selected}
    async with anyio.create_task_group() as group:
        group.start_soon(ticker.run)
        for case in selected:
            async with stall_gate(counter) as gate:
                for _ in range(3):  # let the loop settle
                    await ticker.next()
                for _ in range(repeats):
                    results[case.name].append(await _run(gate, ticker, case))
        group.cancel_scope.cancel()
    return results


def table(runs: dict[str, dict[str, list[Stall]]], repeats: int) -> list[str]:
    """The table's lines: per case, its outcomes and median stalls, CPU and
    wall, building the request and admitting it on each backend in ``runs``."""
    backends = list(runs)
    lines = [
        f"Worst event-loop stall beside one request, ms: CPU / wall (1 ms ticker, "
        f"median of {repeats})",
        f"{'case':<28}{'outcome':<26}{'build':>14}" + "".join(f"{b:>16}" for b in backends),
    ]

    def cell(gaps: list[Gap]) -> str:
        cpu = statistics.median(gap.cpu for gap in gaps)
        wall = statistics.median(gap.wall for gap in gaps)
        return f"{cpu * 1e3:.2f} / {wall * 1e3:.2f}"

    for name in runs[backends[0]]:
        stalls = [stall for backend in backends for stall in runs[backend][name]]
        outcomes = ", ".join(sorted({stall.outcome for stall in stalls}))
        row = f"{name:<28}{outcomes:<26}{cell([stall.build for stall in stalls]):>14}"
        row += "".join(f"{cell([s.admit for s in runs[b][name]]):>16}" for b in backends)
        lines.append(row)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 9")
    args = parser.parse_args()
    repeats = 3 if args.quick else 9
    selected = cases()
    runs = {
        backend: anyio.run(measure, selected, repeats, backend=backend)
        for backend in ("asyncio", "trio")
    }
    print("\n".join(table(runs, repeats)))


if __name__ == "__main__":
    main()
