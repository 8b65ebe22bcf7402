"""How loaded an engine is: offered requests per second over what it can serve.

A continuous-batching engine is "busy" whenever anything runs, so busy time
says little about headroom. We measure **capacity** instead: the completion
rate of the engine model when a sample of the traffic mix is all waiting at
once (FCFS, no admission control), counted between the 20th and the 80th
percentile completion so the ramp-up and the tail are left out. The **load**
of a stream of traffic is its arrival rate over the capacity for its own mix:
below 1 the engine keeps up on average; the seed scenario keeps the traffic
outside its bursts well below 0.7, so what goes wrong there comes from mixing
unlike work, not from plain overload.

The **limit** of a workload (:func:`limit`) is the rate scale at which even
a perfect work-conserving order would leave ``1 - target`` of the offered
cost unserved: the engine's saturated cost throughput for the workload's own
mix (:func:`saturated_cost_rate`) over the offered cost rate, over
``target``. Cost is tokens, prompt plus output (as the engine would
generate them under ``max_new_tokens``). Request-count attainment can sit
slightly above it (small requests are cheaper to serve).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slopolicy.errors import UsageError
from slopolicy.sim.baselines import FCFS
from slopolicy.sim.engine import EngineSpec
from slopolicy.sim.interface import EngineView, Released, Scheduler
from slopolicy.sim.records import RequestRecord, SimOutcome
from slopolicy.sim.simulator import simulate
from slopolicy.sim.workload import SimRequest, Workload

__all__ = (
    "Load",
    "best_cap",
    "capacity",
    "limit",
    "load_outside_bursts",
    "request_cost",
    "saturated_cost_rate",
)


@dataclass(frozen=True, slots=True)
class Load:
    """Offered ``rate_rps`` against ``capacity_rps`` (requests per second)."""

    rate_rps: float
    capacity_rps: float
    requests: int

    @property
    def load(self) -> float:
        """``rate_rps / capacity_rps``: 0.5 means half of what the engine can serve."""
        return self.rate_rps / self.capacity_rps


def capacity(requests: Sequence[SimRequest], engine: EngineSpec, *, sample: int = 2000) -> float:
    """Requests per second ``engine`` completes from a backlog of this mix.

    Uses the first ``sample`` requests (cycled if there are fewer), all
    arriving at 0, with their outputs capped at ``max_new_tokens``. A
    ``llama.cpp`` engine's backlog waits in front of it, its slots kept
    full: queued inside llama-server every request slows every token
    (``T_wake``), which no one serving it would choose.
    """
    if not requests:
        raise UsageError("capacity needs at least one request")
    picked = [requests[i % len(requests)] for i in range(max(sample, 50))]
    held = _Capped(engine.max_num_seqs) if engine.kind == "llama.cpp" else None
    records = _saturated(picked, engine, held)
    finishes = sorted(
        r.finished_at
        for r in records
        if r.outcome is SimOutcome.COMPLETED and r.finished_at is not None
    )
    low, high = _window(finishes, "capacity")
    return (high - low) / (finishes[high] - finishes[low])


class _Capped(FCFS):
    """FCFS holding requests while ``cap`` run or wait in the engine."""

    name = "capped"

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap

    def dispatch(self, now: float, engine: EngineView) -> Released:
        room = max(0, self.cap - engine.running - engine.waiting)
        started, self._pending = tuple(self._pending[:room]), self._pending[room:]
        return Released(started)


def _saturated(
    picked: Sequence[SimRequest], engine: EngineSpec, scheduler: Scheduler | None = None
) -> tuple[RequestRecord, ...]:
    """``picked``, all waiting at 0 (outputs capped at ``max_new_tokens``),
    through ``scheduler`` (default FCFS). Each is its own request: an agent
    task's turns lose their task (a backlog has no tool waits, and a mix
    cycled to its sample size would hold a task twice)."""
    backlog = tuple(
        dataclasses.replace(
            r,
            id=f"capacity-{i}",
            arrival=0.0,
            retries=0,
            output_tokens=_output(r),
            task=None,
            turn=0,
            turns=None,
            tool_wait=0.0,
            task_deadline=None,
        )
        for i, r in enumerate(picked)
    )
    chosen = FCFS() if scheduler is None else scheduler
    return simulate(Workload(backlog, 0.0, "capacity"), chosen, engine, report_every=0).records


def _output(request: SimRequest) -> int:
    return min(request.output_tokens, request.max_new_tokens)


def request_cost(request: SimRequest) -> int:
    """A request's cost to the engine in tokens: prompt plus output (as the
    engine would generate it under ``max_new_tokens``)."""
    return request.prompt_tokens + _output(request)


def _window(times: Sequence[float], what: str) -> tuple[int, int]:
    """The indices of the 20th and 80th percentile of sorted ``times``."""
    low, high = int(0.2 * len(times)), int(0.8 * len(times))
    if high <= low or high >= len(times) or times[high] <= times[low]:
        raise UsageError(f"too few requests to measure {what}")
    return low, high


def saturated_cost_rate(
    requests: Sequence[SimRequest], engine: EngineSpec, *, sample: int = 2000
) -> float:
    """Tokens (prompt plus output) per second ``engine`` serves from a backlog of this mix.

    ``sample`` requests picked evenly over ``requests`` (so the backlog has the
    whole workload's mix; cycled when there are fewer) all wait at 0 and start
    in order while at most ``C`` run or wait in the engine; the rate is the
    cost of the requests whose first token comes between the 20th and the
    80th percentile first token, over that time (counting by start keeps the
    window's mix the backlog's, whatever finishes first). With a full KV cache
    FCFS preempts by recompute and wastes work, which a cap avoids, so the
    best cap stands in for a perfect work-conserving order: ``C`` doubles from
    1 up to ``max_num_seqs``, then halves the gap on either side of the best
    until the caps next to it are within an eighth of it (:func:`best_cap`).
    A mix of long prompts can need a cap of a few requests (on the
    ``long-conversation`` trace of ``benchmarks/`` 9, at 1.5 times the rate
    of 32).
    """
    if not requests:
        raise UsageError("the limit needs at least one request")
    count = max(sample, 50)
    picked = [requests[(i * len(requests)) // count % len(requests)] for i in range(count)]
    _, best = best_cap(
        lambda cap: _window_rate(_saturated(picked, engine, _Capped(cap))), engine.max_num_seqs
    )
    return best


def best_cap(measure: Callable[[int], float], most: int) -> tuple[int, float]:
    """The cap in ``1..most`` with the highest ``measure``, and that value,
    searched as :func:`saturated_cost_rate` says (doubling, then halving the
    gaps beside the best); ties go to the smaller cap. Each cap is measured
    once: about ``log2(most) + 6`` of them on a single peak."""
    if most < 1:
        raise UsageError(f"most must be >= 1, got {most!r}")
    value = functools.cache(measure)
    caps, cap = [], 1
    while cap < most:
        caps.append(cap)
        cap *= 2
    caps.append(most)
    while True:
        best = max(caps, key=lambda c: (value(c), -c))
        at = caps.index(best)
        beside = [caps[i] for i in (at - 1, at + 1) if 0 <= i < len(caps)]
        halves = {(best + other) // 2 for other in beside if abs(other - best) * 8 > best}
        halves -= set(caps)
        if not halves:
            return best, value(best)
        caps = sorted({*caps, *halves})


def _window_rate(records: Sequence[RequestRecord]) -> float:
    firsts = sorted(
        (r.first_token_at, request_cost(r.request)) for r in records if r.first_token_at is not None
    )
    times = [t for t, _ in firsts]
    low, high = _window(times, "the saturated cost rate")
    served = sum(cost for _, cost in firsts[low:high])
    return served / (times[high] - times[low])


def limit(
    workload: Workload, engine: EngineSpec, *, target: float = 0.9, sample: int = 2000
) -> float:
    """The rate scale of ``workload`` past which even a perfect work-conserving
    order leaves ``1 - target`` of the offered cost unserved (see the module doc)."""
    if not 0 < target <= 1:
        raise UsageError(f"target must be in (0, 1], got {target!r}")
    if not len(workload) or workload.duration <= 0:
        raise UsageError("the limit needs requests arriving over a positive duration")
    offered = sum(request_cost(r) for r in workload) / workload.duration
    return saturated_cost_rate(workload.requests, engine, sample=sample) / offered / target


def load_outside_bursts(workload: Workload, engine: EngineSpec, *, sample: int = 2000) -> Load:
    """The load of the workload's steady traffic: every stream but its bursts."""
    steady = [r for r in workload if r.stream not in workload.bursts]
    if not steady or workload.duration <= 0:
        raise UsageError("the workload has no steady traffic to measure")
    rate = len(steady) / workload.duration
    return Load(rate, capacity(steady, engine, sample=sample), len(steady))
