"""Hypothesis strategies for requests, policy configurations, simulated
workloads and engine signals.

Use them to property-test your own rules and policies::

    from hypothesis import given
    from slopolicy.testing.strategies import requests, workloads

    @given(requests(lanes=["interactive", "heavy"]))
    def test_my_rule_never_crashes(request): ...

    @given(workloads(lanes=["interactive"]))
    def test_my_policy_keeps_its_slo(workload): ...   # see docs/simulator.md
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    from hypothesis import strategies as st
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "slopolicy.testing needs hypothesis: pip install 'slopolicy[testing]'"
    ) from error

from slopolicy.core.health.signals import EngineSignals
from slopolicy.core.request import REASONING_EFFORTS, Message, Request
from slopolicy.sim import arrival_processes as arrivals
from slopolicy.sim import lengths
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.profiles import PROFILES
from slopolicy.sim.streams import Stream, Tenants, build_workload
from slopolicy.sim.workload import SimRequest, Workload
from slopolicy.testing._configs import names as _names
from slopolicy.testing._configs import policy_configs as policy_configs
from slopolicy.testing._configs import policy_documents as policy_documents

__all__ = (
    "arrival_processes",
    "engine_specs",
    "length_distributions",
    "messages",
    "policy_configs",
    "policy_documents",
    "requests",
    "signal_sequences",
    "sim_requests",
    "tenants",
    "workloads",
)


def messages(max_size: int = 6) -> st.SearchStrategy[tuple[Message, ...]]:
    """Chat conversations of 1 to ``max_size`` messages."""
    message = st.builds(
        Message,
        role=st.sampled_from(["system", "user", "assistant"]),
        content=st.text(max_size=200),
        name=st.none() | _names,
    )
    return st.lists(message, min_size=1, max_size=max_size).map(tuple)


def requests(
    *,
    tenants: Sequence[str] = ("acme", "globex", "initech"),
    lanes: Sequence[str] = (),
    max_prompt_tokens: int = 200_000,
    max_new_tokens: int = 8192,
) -> st.SearchStrategy[Request]:
    """Valid requests with known prompt sizes, sometimes text or chat, hinting ``lanes``."""
    prompt_kwargs: st.SearchStrategy[dict[str, Any]] = st.one_of(
        st.builds(dict, prompt_tokens=st.integers(0, max_prompt_tokens)),
        st.builds(dict, prompt=st.text(max_size=300)),
        st.builds(dict, messages=messages()),
    )
    n = st.integers(1, 4)

    @st.composite
    def build(draw: st.DrawFn) -> Request:
        sequences = draw(n)
        return Request(
            tenant=draw(st.sampled_from(list(tenants))),
            max_new_tokens=draw(st.integers(1, max_new_tokens)),
            n=sequences,
            best_of=draw(st.none() | st.integers(sequences, 6)),
            logprobs=draw(st.none() | st.integers(0, 20)),
            reasoning_effort=draw(st.none() | st.sampled_from(sorted(REASONING_EFFORTS))),
            tool_risk=draw(st.floats(0, 1)),
            lane=draw(st.none() | st.sampled_from(list(lanes))) if lanes else None,
            **draw(prompt_kwargs),
        )

    return build()


def tenants(*, min_size: int = 1, max_size: int = 6) -> st.SearchStrategy[tuple[str, ...]]:
    """Between ``min_size`` and ``max_size`` distinct tenant names."""
    return st.lists(_names, min_size=min_size, max_size=max_size, unique=True).map(tuple)


def sim_requests(
    *,
    tenants: Sequence[str] = ("acme", "globex", "initech"),
    lanes: Sequence[str] = (),
    max_prompt_tokens: int = 8192,
    max_output_tokens: int = 1024,
    max_arrival: float = 60.0,
    id: str = "r",
) -> st.SearchStrategy[SimRequest]:
    """One simulated request called ``id`` (lane hints from ``lanes``, or none)."""

    @st.composite
    def build(draw: st.DrawFn) -> SimRequest:
        output = draw(st.integers(1, max_output_tokens))
        return SimRequest(
            id=id,
            arrival=draw(st.floats(0, max_arrival)),
            tenant=draw(st.sampled_from(list(tenants))),
            prompt_tokens=draw(st.integers(1, max_prompt_tokens)),
            output_tokens=output,
            max_new_tokens=draw(st.integers(1, max_output_tokens)),
            lane=draw(st.none() | st.sampled_from(list(lanes))) if lanes else None,
            retries=draw(st.integers(0, 3)),
        )

    return build()


def arrival_processes(
    *, max_rate: float = 10.0, horizon: float = 60.0, bursts: bool = True
) -> st.SearchStrategy[arrivals.ArrivalProcess]:
    """Poisson, bursty gamma, on/off, ramps and (when ``bursts``) bursts, at
    most ``max_rate`` requests per second on average (a burst: at most
    ``max_rate x horizon / 4`` arrivals within ``horizon / 4`` seconds)."""
    rate = st.floats(0.05, max_rate)
    burst_size = max(1, int(max_rate * horizon / 4))
    steady: list[st.SearchStrategy[arrivals.ArrivalProcess]] = [
        st.builds(arrivals.Poisson, rate),
        st.builds(arrivals.GammaArrivals, rate, st.floats(0.5, 8)),
        st.builds(arrivals.OnOff, rate, st.floats(0.5, horizon), st.floats(0.5, horizon)),
        st.builds(arrivals.Ramp, rate, rate),
    ]
    if not bursts:
        return st.one_of(steady)
    burst = st.builds(
        arrivals.Burst,
        st.integers(1, burst_size),
        st.floats(0, horizon * 0.9),
        st.floats(0, horizon / 4),
    )
    return st.one_of([*steady, burst])


def length_distributions(
    *, low: int = 1, high: int = 4096
) -> st.SearchStrategy[lengths.LengthDistribution]:
    """Constant, uniform, log-normal or empirical token counts in ``[low, high]``."""
    count = st.integers(low, high)
    return st.one_of(
        st.builds(lengths.Constant, count),
        st.tuples(count, count).map(lambda p: lengths.Uniform(min(p), max(p))),
        st.builds(
            lengths.LogNormal,
            st.floats(max(low, 1), high),
            st.floats(0, 1.5),
            st.just(low),
            st.just(high),
        ),
        st.lists(count, min_size=1, max_size=20).map(lengths.Empirical),
    )


def workloads(
    *,
    tenants: Sequence[str] | None = None,
    lanes: Sequence[str] = (),
    max_streams: int = 3,
    max_duration: float = 60.0,
    max_rate: float = 5.0,
    max_prompt_tokens: int = 4096,
    max_output_tokens: int = 512,
    max_requests: int = 300,
    bursts: bool = True,
) -> st.SearchStrategy[Workload]:
    """Seeded workloads of 1 to ``max_streams`` composed streams (any
    arrival process and length distribution, lane hints from ``lanes``), cut
    to the first ``max_requests`` arrivals; ``bursts=False`` leaves out
    :class:`~slopolicy.sim.arrival_processes.Burst` streams (many arrivals at once)."""

    @st.composite
    def build(draw: st.DrawFn) -> Workload:
        duration = draw(st.floats(1.0, max_duration))
        names = list(tenants) if tenants is not None else list(draw(_tenant_names))
        streams = []
        for index in range(draw(st.integers(1, max_streams))):
            senders = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
            streams.append(
                Stream(
                    name=f"s{index}",
                    arrivals=draw(
                        arrival_processes(max_rate=max_rate, horizon=duration, bursts=bursts)
                    ),
                    prompt_tokens=draw(length_distributions(high=max_prompt_tokens)),
                    output_tokens=draw(length_distributions(high=max_output_tokens)),
                    tenants=Tenants(tuple(senders), draw(st.sampled_from([0.0, 1.0]))),
                    max_new_tokens=draw(st.integers(1, max_output_tokens)),
                    lane=draw(st.sampled_from(list(lanes))) if lanes else None,
                    retries=draw(st.integers(0, 2)),
                )
            )
        seed = draw(st.integers(0, 2**32 - 1))
        workload = build_workload(streams, duration=duration, seed=seed, name="hypothesis")
        kept = workload.requests[:max_requests]
        return Workload(kept, workload.duration, workload.name, workload.bursts)

    return build()


_tenant_names = tenants(min_size=1, max_size=5)


def engine_specs(*, max_blocks: int = 4096) -> st.SearchStrategy[EngineSpec]:
    """Small engines (any profile, a few seats, a small KV cache) so properties
    run fast and KV pressure happens."""

    @st.composite
    def build(draw: st.DrawFn) -> EngineSpec:
        seats = draw(st.integers(1, 64))
        return EngineSpec(
            PROFILES[draw(st.sampled_from(sorted(PROFILES)))],
            max_num_seqs=seats,
            max_num_batched_tokens=draw(st.integers(max(seats, 512), 8192)),
            long_prefill_token_threshold=draw(st.sampled_from([0, 256, 1024])),
            num_blocks=draw(st.integers(max_blocks // 4, max_blocks)),
        )

    return build()


def signal_sequences(
    *, min_size: int = 1, max_size: int = 30, start: float = 0.0, max_gap: float = 5.0
) -> st.SearchStrategy[list[EngineSignals]]:
    """Engine reports at increasing ``observed_at`` times (gaps up to
    ``max_gap`` seconds), each field sometimes missing, as a scraper sees them."""
    report = st.tuples(
        st.floats(0, max_gap),
        st.none() | st.floats(0, 1),
        st.none() | st.integers(0, 512),
        st.none() | st.integers(0, 512),
        st.none() | st.floats(0, 50_000),
        st.none() | st.floats(0, 1),
        st.none() | st.floats(0, 100),
        st.none() | st.integers(1, 10_000_000),
    )
    Row = tuple[
        float,
        float | None,
        int | None,
        int | None,
        float | None,
        float | None,
        float | None,
        int | None,
    ]

    def build(rows: list[Row]) -> list[EngineSignals]:
        found, now = [], start
        for gap, kv, waiting, running, tps, timeouts, preempting, pool in rows:
            now += gap
            found.append(
                EngineSignals(
                    observed_at=now,
                    kv_usage=kv,
                    waiting=waiting,
                    running=running,
                    decode_tps=tps,
                    tool_timeout_rate=timeouts,
                    preemption_rate=preempting,
                    kv_capacity_tokens=pool,
                )
            )
        return found

    return st.lists(report, min_size=min_size, max_size=max_size).map(build)
