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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from slopolicy.errors import UsageError
from slopolicy.sim.baselines import FCFS
from slopolicy.sim.engine import EngineSpec
from slopolicy.sim.records import SimOutcome
from slopolicy.sim.simulator import simulate
from slopolicy.sim.workload import SimRequest, Workload

__all__ = ("Load", "capacity", "load_outside_bursts")


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
    arriving at 0, with their outputs capped at ``max_new_tokens``.
    """
    if not requests:
        raise UsageError("capacity needs at least one request")
    picked = [requests[i % len(requests)] for i in range(max(sample, 50))]
    backlog = tuple(
        dataclasses.replace(
            r,
            id=f"capacity-{i}",
            arrival=0.0,
            retries=0,
            output_tokens=min(r.output_tokens, r.max_new_tokens),
        )
        for i, r in enumerate(picked)
    )
    result = simulate(Workload(backlog, 0.0, "capacity"), FCFS(), engine, report_every=0)
    finishes = sorted(
        r.finished_at
        for r in result.records
        if r.outcome is SimOutcome.COMPLETED and r.finished_at is not None
    )
    low, high = int(0.2 * len(finishes)), int(0.8 * len(finishes))
    if high <= low or finishes[high] <= finishes[low]:
        raise UsageError("too few completions to measure capacity")
    return (high - low) / (finishes[high] - finishes[low])


def load_outside_bursts(workload: Workload, engine: EngineSpec, *, sample: int = 2000) -> Load:
    """The load of the workload's steady traffic: every stream but its bursts."""
    steady = [r for r in workload if r.stream not in workload.bursts]
    if not steady or workload.duration <= 0:
        raise UsageError("the workload has no steady traffic to measure")
    rate = len(steady) / workload.duration
    return Load(rate, capacity(steady, engine, sample=sample), len(steady))
