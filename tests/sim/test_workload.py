from __future__ import annotations

import itertools
import random
import statistics

import pytest

from slopolicy.errors import UsageError
from slopolicy.sim import (
    Burst,
    Constant,
    Empirical,
    GammaArrivals,
    LogNormal,
    OnOff,
    Poisson,
    Ramp,
    SimRequest,
    Stream,
    Tenants,
    Uniform,
    Workload,
    build_workload,
)


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def test_poisson_arrives_at_its_rate() -> None:
    times = Poisson(2.0).times(random.Random(1), 0.0, 10_000.0)
    assert len(times) == pytest.approx(20_000, rel=0.03)
    assert times == sorted(times)
    assert all(0 <= t < 10_000 for t in times)


def test_gamma_arrivals_have_the_asked_burstiness() -> None:
    times = GammaArrivals(5.0, cv=4.0).times(random.Random(2), 0.0, 20_000.0)
    gaps = _gaps(times)
    assert len(times) == pytest.approx(100_000, rel=0.05)
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(4.0, rel=0.1)


def test_on_off_is_silent_while_off() -> None:
    process = OnOff(10.0, on=5.0, off=15.0)
    times = process.times(random.Random(3), 0.0, 2_000.0)
    assert all((t % 20.0) < 5.0 for t in times)
    assert len(times) / 2_000 == pytest.approx(process.mean_rate, rel=0.05)


def test_a_ramp_grows_from_its_start_rate_to_its_end_rate() -> None:
    times = Ramp(0.0, 20.0).times(random.Random(4), 0.0, 1_000.0)
    first = sum(1 for t in times if t < 500)
    assert first == pytest.approx(2_500, rel=0.1)  # the first half holds a quarter
    assert len(times) == pytest.approx(10_000, rel=0.05)


def test_a_burst_arrives_at_once_spread_evenly() -> None:
    assert Burst(4, at=10.0, spread=2.0).times(random.Random(0), 5.0, 100.0) == [
        15.0,
        15.5,
        16.0,
        16.5,
    ]
    assert Burst(3, at=0.0).times(random.Random(0), 0.0, 1.0) == [0.0, 0.0, 0.0]
    assert Burst(3, at=2.0).times(random.Random(0), 0.0, 1.0) == []


@pytest.mark.parametrize(
    "make",
    [
        lambda: Poisson(0),
        lambda: GammaArrivals(1, cv=0),
        lambda: OnOff(1, 0, 1),
        lambda: Ramp(0, 0),
        lambda: Burst(0),
        lambda: Constant(0),
        lambda: Uniform(5, 4),
        lambda: LogNormal(0.5, 1),
        lambda: Empirical([]),
    ],
)
def test_bad_parameters_raise(make: object) -> None:
    with pytest.raises(UsageError):
        make()  # type: ignore[operator]


def test_lengths_draw_within_their_bounds() -> None:
    rng = random.Random(5)
    draws = [LogNormal(600, 0.8, 16, 6000).sample(rng) for _ in range(20_000)]
    assert min(draws) >= 16
    assert max(draws) <= 6000
    assert statistics.median(draws) == pytest.approx(600, rel=0.05)
    assert {Uniform(3, 5).sample(rng) for _ in range(200)} == {3, 4, 5}
    assert {Empirical([7, 9]).sample(rng) for _ in range(200)} == {7, 9}
    assert Constant(12).sample(rng) == 12


def test_zipf_skew_makes_the_first_tenant_busiest() -> None:
    tenants = Tenants.numbered("t-", 10, skew=1.0)
    assert tenants.names[0] == "t-0"
    assert tenants.names[-1] == "t-9"
    pick = tenants.picker(random.Random(6))
    counts = dict.fromkeys(tenants.names, 0)
    for _ in range(20_000):
        counts[pick()] += 1
    assert counts["t-0"] > 2 * counts["t-4"] > 0
    uniform = Tenants(("a", "b")).picker(random.Random(7))
    assert {uniform() for _ in range(100)} == {"a", "b"}
    weighted = Tenants(("a", "b", "c"), weights=(3, 1, 0)).picker(random.Random(8))
    drawn = [weighted() for _ in range(8_000)]
    assert drawn.count("c") == 0
    assert drawn.count("a") / drawn.count("b") == pytest.approx(3, rel=0.1)
    with pytest.raises(UsageError, match="one weight"):
        Tenants(("a", "b"), weights=(1,))


def _stream(name: str, rate: float = 2.0) -> Stream:
    return Stream(
        name,
        Poisson(rate),
        LogNormal(500, 0.5),
        Uniform(10, 100),
        Tenants(("a", "b")),
        max_new_tokens=64,
        lane="interactive",
        retries=2,
    )


def test_a_stream_is_reproducible_and_independent_of_the_others() -> None:
    alone = build_workload([_stream("chat")], duration=100, seed=3)
    again = build_workload([_stream("chat")], duration=100, seed=3)
    mixed = build_workload([_stream("chat"), _stream("other", 5)], duration=100, seed=3)
    assert alone.requests == again.requests
    assert [r for r in mixed if r.stream == "chat"] == list(alone.requests)
    first = alone.requests[0]
    assert first.id == "chat-0"
    assert (first.max_new_tokens, first.lane, first.retries) == (64, "interactive", 2)
    assert build_workload([_stream("chat")], duration=100, seed=4).requests != alone.requests


def test_streams_start_and_end_inside_the_workload() -> None:
    stream = Stream("s", Poisson(5), Constant(10), Constant(5), Tenants(("a",)), start=10, end=20)
    workload = build_workload([stream], duration=15, seed=0)
    assert all(10 <= r.arrival < 15 for r in workload)
    assert workload.duration == 15


def test_workloads_sort_scale_window_and_filter() -> None:
    requests = [
        SimRequest("b", 2.0, "t", 10, 5, 5, stream="x"),
        SimRequest("a", 1.0, "t", 10, 5, 5, stream="y"),
    ]
    workload = Workload(tuple(requests), 10.0, "w", frozenset({"y"}))
    assert [r.id for r in workload] == ["a", "b"]
    assert workload.streams == ("y", "x")
    faster = workload.scaled(2.0)
    assert [r.arrival for r in faster] == [0.5, 1.0]
    assert faster.duration == 5.0
    window = workload.window(1.5, 5.0)
    assert [(r.id, r.arrival) for r in window] == [("b", 0.5)]
    assert window.duration == 3.5
    assert [r.id for r in workload.only(["x"])] == ["b"]
    assert workload.only(["x"]).bursts == frozenset()
    merged = workload.merged(Workload.of([SimRequest("c", 20.0, "u", 1, 1, 1)]))
    assert len(merged) == 3
    assert merged.duration == 20.0
    with pytest.raises(UsageError, match="unique"):
        Workload.of([*requests, requests[0]])
    with pytest.raises(UsageError, match="rate_scale"):
        workload.scaled(0)
    with pytest.raises(UsageError, match="arrival must be within"):
        workload.scaled(1e-12)  # stretched past MAX_ARRIVAL


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"prompt_tokens": 0}, "prompt_tokens"),
        ({"output_tokens": True}, "output_tokens"),
        ({"arrival": -1.0}, "arrival"),
        ({"retries": -1}, "retries"),
        ({"tenant": ""}, "tenant"),
        ({"arrival": float("nan")}, "arrival"),
        ({"arrival": 2e9}, r"arrival must be within \[0, 1e\+09\]"),
        ({"tenant": "t" * 300}, "tenant: longer than 256"),  # what the policy would refuse
        ({"lane": ""}, "lane: must not be empty"),
        ({"tier": "x" * 257}, "tier: longer than 256"),
    ],
)
def test_bad_requests_raise(changes: dict[str, object], field: str) -> None:
    values: dict[str, object] = {
        "id": "r",
        "arrival": 0.0,
        "tenant": "t",
        "prompt_tokens": 1,
        "output_tokens": 1,
        "max_new_tokens": 1,
    }
    values.update(changes)
    with pytest.raises(UsageError, match=field):
        SimRequest(**values)  # type: ignore[arg-type]
