"""The limit's saturated throughput: the best backlog cap, found by search."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy.errors import UsageError
from slopolicy.sim import Constant, EngineSpec, Poisson, Stream, Tenants, build_workload, profile
from slopolicy.sim.offered_load import _Capped, _saturated, _window_rate, best_cap
from slopolicy.sim.offered_load import saturated_cost_rate as saturated
from slopolicy.sim.workload import SimRequest

H100 = EngineSpec(profile("llama3-8b/h100"))


@given(peak=st.integers(1, 256), most=st.integers(1, 256))
def test_on_a_single_peak_the_search_finds_it_or_a_cap_within_an_eighth(
    peak: int, most: int
) -> None:
    calls: list[int] = []

    def measured(cap: int) -> float:
        assert 1 <= cap <= most
        calls.append(cap)
        return -abs(cap - peak)

    found, value = best_cap(measured, most)
    target = min(peak, most)
    assert abs(found - target) * 8 <= max(found, 8)
    assert value == -abs(found - peak)
    assert len(calls) == len(set(calls))  # each cap measured once
    assert len(calls) <= most.bit_length() + 1 + 8  # doubling, then a few halvings


def test_a_cap_of_one_is_the_only_cap_when_one_seat_is_all_there_is() -> None:
    assert best_cap(lambda cap: float(cap), 1) == (1, 1.0)


def test_no_seat_at_all_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="most must be >= 1"):
        best_cap(lambda cap: float(cap), 0)


def test_ties_go_to_the_smaller_cap() -> None:
    assert best_cap(lambda cap: 1.0, 256) == (1, 1.0)


def _long_prompts() -> list[SimRequest]:
    stream = Stream(
        "docs", Poisson(1.0), Constant(40_000), Constant(1_000), max_new_tokens=2048,
        tenants=Tenants(("docs",)),
    )  # fmt: skip
    return list(build_workload([stream], duration=200.0, seed=5, name="long").requests)


def test_a_mix_of_long_prompts_is_measured_at_a_cap_that_does_not_thrash_the_kv_cache() -> None:
    # 40k-token prompts: the KV cache (427k tokens) holds about ten at once,
    # so a cap of 16 or more preempts by recompute and wastes most of the
    # work; the limit must not read the engine's throughput from such a
    # backlog (it once took the best of 32, 64, 128 and 256).
    requests = _long_prompts()
    picked = requests[:200]
    thrashing = _saturated(picked, H100, _Capped(32))
    assert sum(r.preemptions for r in thrashing) > 0  # the premise
    at_32 = _window_rate(thrashing)
    at_8 = _window_rate(_saturated(picked, H100, _Capped(8)))
    assert at_8 > at_32  # the premise: a small cap serves more
    best = saturated(requests, H100, sample=200)
    assert best >= at_8
    assert best > 2 * at_32
