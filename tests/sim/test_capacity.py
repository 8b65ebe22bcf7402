"""Goodput capacity: the search on synthetic curves, and a short real sweep."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import PolicyConfig
from slopolicy.errors import UsageError
from slopolicy.sim import (
    SWEEP_SCHEMA,
    Capacity,
    Constant,
    EngineSpec,
    LogNormal,
    Poisson,
    Stream,
    Tenants,
    Workload,
    build_workload,
    find_capacity,
    limit,
    profile,
    sweep,
    sweep_to_json,
)
from slopolicy.sim.capacity import STEP, grid_index, grid_point, interpolate

H100 = EngineSpec(profile("llama3-8b/h100"))


def _search(
    curve: Callable[[float], float], start: int = 0, refine: int = 3
) -> tuple[Capacity, list[float]]:
    calls: list[float] = []

    def attain(scale: float) -> float:
        calls.append(scale)
        return curve(scale)

    capacity, seen = find_capacity(attain, start=start, lowest=-16, highest=8, refine=refine)
    assert sorted(calls) == sorted(seen)  # each scale run once
    return capacity, calls


def test_a_sharp_knee_is_bracketed_to_the_refined_grid() -> None:
    capacity, calls = _search(lambda s: 0.97 if s <= 3.04 else 0.5)
    assert capacity.bound == "found"
    assert capacity.low <= 3.04 < capacity.high
    assert capacity.high / capacity.low == pytest.approx(STEP ** (1 / 8))
    assert capacity.low <= capacity.scale <= capacity.high
    # 1, 1.41, 2, 2.83 pass, 4 fails, then three bisections.
    assert len(calls) == 5 + 3


def test_a_straight_line_in_log_scale_is_interpolated_exactly() -> None:
    knee = 2**2.3

    def curve(scale: float) -> float:
        return 0.9 - 0.1 * (math.log2(scale) - 2.3)

    capacity, _ = _search(curve)
    assert capacity.scale == pytest.approx(knee, rel=1e-9)
    coarse, _ = _search(curve, refine=0)
    assert coarse.scale == pytest.approx(knee, rel=1e-9)
    assert (coarse.low, coarse.high) == (grid_point(4), grid_point(5))


def test_a_curve_that_fails_at_the_start_is_walked_down() -> None:
    capacity, calls = _search(lambda s: 1.0 if s < 0.3 else 0.0, start=2)
    assert capacity.bound == "found"
    assert capacity.low < 0.3 <= capacity.high
    assert calls[:5] == [2.0, grid_point(1), 1.0, grid_point(-1), 0.5]


def test_curves_that_never_cross_give_bounds() -> None:
    above, _ = _search(lambda s: 1.0)
    assert (above.bound, above.scale, str(above)) == ("above", grid_point(8), ">= 16x")
    below, _ = _search(lambda s: 0.0)
    assert (below.bound, below.scale, str(below)) == ("below", grid_point(-16), "< 0.00391x")


def test_the_search_stops_at_the_first_failure_above_a_pass() -> None:
    # A dip at 2x and a recovery above it: the knee is taken at the dip.
    capacity, _ = _search(lambda s: 0.5 if 1.9 < s < 2.1 else (0.95 if s < 8 else 0.2))
    assert capacity.high <= 2.0


@given(st.floats(1e-3, 1e3), st.floats(0, 1), st.floats(0, 1))
def test_interpolation_stays_inside_its_bracket(low: float, a: float, b: float) -> None:
    high = low * STEP
    a_low, a_high = max(a, b), min(a, b)
    found = interpolate(low, a_low, high, a_high, 0.9)
    assert low * (1 - 1e-12) <= found <= high * (1 + 1e-12)


def test_the_grid_is_powers_of_root_two() -> None:
    assert [grid_point(i) for i in (-2, 0, 1, 2)] == [0.5, 1.0, pytest.approx(STEP), 2.0]
    assert [grid_index(s) for s in (0.5, 0.7, 1.0, 1.5, 4.0)] == [-2, -2, 0, 1, 4]
    with pytest.raises(UsageError):
        find_capacity(lambda s: 1.0, start=5, lowest=0, highest=4)


def _small_workload() -> Workload:
    chat = Stream(
        "chat",
        Poisson(4.0),
        LogNormal(500, 0.6, 16, 4000),
        LogNormal(120, 0.6, 8, 512),
        max_new_tokens=1024,
        tenants=Tenants.numbered("t", 4, skew=1.0),
    )
    docs = Stream(
        "docs", Poisson(0.1), Constant(20_000), Constant(200), max_new_tokens=1024,
        tenants=Tenants(("docs",)),
    )  # fmt: skip
    return build_workload([chat, docs], duration=60.0, seed=3, name="small")


def test_a_short_real_sweep_finds_each_policys_knee_and_the_limit() -> None:
    workload = _small_workload()
    found = sweep(workload, PolicyConfig(), H100, policies=("fcfs", "vtc", "rpm"), refine=2)
    assert found.limit == pytest.approx(limit(workload, H100))
    assert list(found.policies) == ["fcfs", "vtc", "rpm"]
    for policy in found.policies.values():
        capacity = policy.capacity
        assert capacity.bound == "found"
        assert policy.attainment(capacity.low) is not None
        assert (
            (policy.attainment(capacity.low) or 0) >= 0.9 > (policy.attainment(capacity.high) or 0)
        )
    fcfs = found.policies["fcfs"].capacity.scale
    # The no-harm range: the coarse points from a quarter of FCFS's capacity up to it.
    harm = found.no_harm["rpm"]
    assert harm.worst is not None
    assert harm.worst < 0
    assert fcfs / 4 <= harm.low
    assert harm.high <= fcfs
    assert set(found.no_harm) == {"vtc", "rpm"}
    data = sweep_to_json(found)
    assert data["schema"] == SWEEP_SCHEMA
    assert data["policies"]["fcfs"]["capacity"]["scale"] == fcfs
    assert data["policies"]["vtc"]["capacity_of_limit"] == pytest.approx(
        found.policies["vtc"].capacity.scale / found.limit
    )
    assert found.grid == tuple(sorted(found.grid))
