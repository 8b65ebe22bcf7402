"""Synthetic streams of requests, composed into a seeded :class:`Workload`.

A :class:`Stream` is one kind of traffic: an arrival process, prompt and
output length distributions, a ``max_new_tokens``, the tenants that send it
(a :class:`Tenants` pool, uniform or Zipf-skewed) and a lane hint. Each stream
draws from its own ``random.Random`` seeded with ``"{seed}:{stream name}"``,
so adding or changing one stream leaves the others' requests as they were.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from slopolicy.errors import UsageError
from slopolicy.sim.agents import AgentTurns
from slopolicy.sim.arrival_processes import ArrivalProcess, Burst
from slopolicy.sim.lengths import LengthDistribution
from slopolicy.sim.workload import SimRequest, Workload

__all__ = ("MAX_REQUESTS", "MAX_TENANTS", "Stream", "Tenants", "build_workload")

#: Most requests the streams of one workload may be expected to make: past it
#: a rate or a duration off by orders of magnitude would build for hours.
MAX_REQUESTS = 10_000_000
#: Most tenants :meth:`Tenants.numbered` makes.
MAX_TENANTS = 1_000_000


@dataclass(frozen=True, slots=True)
class Tenants:
    """Who sends a stream's requests: ``names``, picked in proportion to
    ``weights`` when given, else with Zipf weights ``1/(i+1)**skew`` (``skew``
    0: uniformly; > 0: the first is busiest)."""

    names: tuple[str, ...]
    skew: float = 0.0
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not self.names or not all(isinstance(n, str) and n for n in self.names):
            raise UsageError("tenants need at least one non-empty name")
        if len(set(self.names)) != len(self.names):
            raise UsageError("tenant names must be unique")
        if not self.skew >= 0:
            raise UsageError(f"skew must be >= 0, got {self.skew!r}")
        if self.weights is not None:
            weights = tuple(self.weights)
            object.__setattr__(self, "weights", weights)
            if len(weights) != len(self.names) or not all(w >= 0 for w in weights):
                raise UsageError("give one weight >= 0 per tenant")
            if not sum(weights) > 0:
                raise UsageError("tenant weights must not all be 0")

    @classmethod
    def numbered(cls, prefix: str, count: int, *, skew: float = 0.0) -> Tenants:
        """``count`` tenants called ``prefix0``, ``prefix1``..."""
        if not 1 <= count <= MAX_TENANTS:
            raise UsageError(f"count must be within [1, {MAX_TENANTS:,}], got {count!r}")
        width = len(str(count - 1))
        return cls(tuple(f"{prefix}{i:0{width}d}" for i in range(count)), skew)

    def picker(self, rng: random.Random) -> _Picker:
        """A function drawing one tenant name per call from ``rng``."""
        return _Picker(self, rng)


class _Picker:
    __slots__ = ("_cumulative", "_names", "_rng")

    def __init__(self, tenants: Tenants, rng: random.Random) -> None:
        self._names = tenants.names
        self._rng = rng
        weights = list(tenants.weights or ())
        if tenants.weights is None:
            weights = [1.0 / (i + 1) ** tenants.skew for i in range(len(tenants.names))]
        total, running = sum(weights), 0.0
        self._cumulative = []
        for weight in weights:
            running += weight / total
            self._cumulative.append(running)

    def __call__(self) -> str:
        if len(self._names) == 1:
            return self._names[0]
        point = self._rng.random()
        low, high = 0, len(self._cumulative) - 1
        while low < high:
            middle = (low + high) // 2
            if self._cumulative[middle] < point:
                low = middle + 1
            else:
                high = middle
        return self._names[low]


@dataclass(frozen=True, slots=True)
class Stream:
    """One kind of traffic.

    Attributes:
        name: unique within a workload; request ids are ``{name}-{n}``.
        arrivals: when requests arrive.
        prompt_tokens: prompt lengths.
        output_tokens: what the model would generate.
        max_new_tokens: the client's output limit (outputs above it are cut).
        tenants: who sends the requests.
        lane: lane hint, or ``None``.
        start: seconds after the workload's start when the stream begins.
        end: when it stops (``None``: the workload's duration).
        retries: times a client sends a request again after a retryable refusal.
        tier: tier hint for the policy (default: the tier it gives each tenant).
        agent: each arrival is an agent task of several turns, as this says
            (``None``: single requests); ``prompt_tokens`` is then the first
            turn's prompt.
    """

    name: str
    arrivals: ArrivalProcess
    prompt_tokens: LengthDistribution
    output_tokens: LengthDistribution
    tenants: Tenants
    max_new_tokens: int = 1024
    lane: str | None = None
    start: float = 0.0
    end: float | None = None
    retries: int = 0
    tier: str | None = None
    agent: AgentTurns | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise UsageError("a stream needs a name")
        if self.max_new_tokens < 1:
            raise UsageError(f"stream {self.name!r}: max_new_tokens must be >= 1")
        if self.start < 0 or (self.end is not None and self.end <= self.start):
            raise UsageError(f"stream {self.name!r}: needs 0 <= start < end")

    @property
    def is_burst(self) -> bool:
        """Whether the stream is a one-off burst rather than steady traffic."""
        return isinstance(self.arrivals, Burst)

    def expected(self, duration: float) -> float:
        """About how many requests :meth:`generate` makes over ``duration`` seconds."""
        if isinstance(self.arrivals, Burst):
            return self.arrivals.count
        return self.arrivals.mean_rate * max(0.0, self._end(duration) - self.start)

    def _end(self, duration: float) -> float:
        return duration if self.end is None else min(self.end, duration)

    def generate(self, seed: int, duration: float) -> list[SimRequest]:
        """The stream's requests over a workload of ``duration`` seconds."""
        rng = random.Random(f"{seed}:{self.name}")
        end = self._end(duration)
        pick = self.tenants.picker(rng)
        found: list[SimRequest] = []
        for index, arrival in enumerate(self.arrivals.times(rng, self.start, end)):
            request = SimRequest(
                id=f"{self.name}-{index}",
                arrival=arrival,
                tenant=pick(),
                prompt_tokens=self.prompt_tokens.sample(rng),
                output_tokens=self.output_tokens.sample(rng),
                max_new_tokens=self.max_new_tokens,
                lane=self.lane,
                stream=self.name,
                retries=self.retries,
                tier=self.tier,
            )
            if self.agent is None:
                found.append(request)
            else:
                found.extend(self.agent.expand(request, self.output_tokens, rng))
        return found


def build_workload(
    streams: Sequence[Stream], *, duration: float, seed: int = 0, name: str = "workload"
) -> Workload:
    """The requests of every stream over ``duration`` seconds, on one timeline."""
    names = [stream.name for stream in streams]
    if len(set(names)) != len(names):
        raise UsageError(f"stream names must be unique, got {names}")
    expected = sum(stream.expected(duration) for stream in streams)
    if not expected <= MAX_REQUESTS:
        raise UsageError(
            f"the streams would make about {expected:.3g} requests; at most {MAX_REQUESTS:,}"
        )
    requests = [r for stream in streams for r in stream.generate(seed, duration)]
    bursts = frozenset(stream.name for stream in streams if stream.is_burst)
    return Workload(tuple(requests), duration, name, bursts)
