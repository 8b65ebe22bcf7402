"""Max-min fair shares and the in-share check."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import PolicyConfig
from slopolicy.errors import UsageError
from slopolicy.sim import (
    EngineSpec,
    InShare,
    Workload,
    evaluate,
    fair_shares,
    in_share,
    in_share_attainment,
    make_scheduler,
    profile,
)
from slopolicy.sim.offered_load import saturated_cost_rate
from slopolicy.sim.workload import SimRequest


def test_water_filling_gives_the_small_what_they_ask_and_the_rest_the_level() -> None:
    shares = fair_shares({"a": 1.0, "b": 2.0, "c": 10.0, "d": 20.0}, 15.0)
    assert shares == {"a": 1.0, "b": 2.0, "c": 6.0, "d": 6.0}
    assert fair_shares({"a": 1.0, "b": 2.0}, 15.0) == {"a": 1.0, "b": 2.0}


@given(
    demands=st.dictionaries(st.text(min_size=1, max_size=3), st.floats(0, 1e6), max_size=12),
    capacity=st.floats(1e-3, 1e7),
)
def test_shares_are_max_min_fair(demands: dict[str, float], capacity: float) -> None:
    shares = fair_shares(demands, capacity)
    assert shares.keys() == demands.keys()
    total = sum(shares.values())
    assert total <= capacity * (1 + 1e-9) + 1e-9
    for tenant, share in shares.items():
        assert share <= demands[tenant] * (1 + 1e-9) + 1e-12
    if sum(demands.values()) > capacity:
        assert math.isclose(total, capacity, rel_tol=1e-9)
        # A tenant held below its demand has at least everyone else's share.
        for tenant, share in shares.items():
            if share < demands[tenant] * (1 - 1e-9):
                assert all(share >= other * (1 - 1e-9) for other in shares.values())


@pytest.mark.parametrize(("demands", "capacity"), [({"a": 1.0}, 0.0), ({"a": -1.0}, 1.0)])
def test_bad_input_is_refused(demands: dict[str, float], capacity: float) -> None:
    with pytest.raises(UsageError):
        fair_shares(demands, capacity)


def _workload(rate_big: float, rate_small: float, seconds: float = 20.0) -> Workload:
    requests = []
    for tenant, rate in (("big", rate_big), ("small", rate_small)):
        count = int(rate * seconds)
        requests += [
            SimRequest(f"{tenant}{i}", i / rate, tenant, 1000, 100, 100) for i in range(count)
        ]
    requests.sort(key=lambda r: r.arrival)
    return Workload(tuple(requests), seconds)


def test_a_flooding_tenant_is_above_its_share_and_a_modest_one_within() -> None:
    engine = EngineSpec(profile("llama3-8b/h100"))
    workload = _workload(400.0, 2.0)
    capacity = saturated_cost_rate(workload.requests, engine)
    assert 400.0 * 1100 > capacity / 2 > 2.0 * 1100  # the premise: big floods, small does not
    found = in_share(workload, engine)
    assert found.tenants == frozenset({"small"})
    assert found.offered == 40
    assert found.attainment is None


def test_in_share_attainment_counts_only_the_tenants_within() -> None:
    engine = EngineSpec(profile("llama3-8b/h100"))
    workload = _workload(40.0, 2.0, seconds=5.0)
    config = PolicyConfig()
    _, found = evaluate(make_scheduler("fcfs", config), workload, engine, config)
    share = in_share_attainment(InShare(frozenset({"small"}), 10), found)
    assert share.attained == found.tenants["small"].attained
    assert share.attained is not None
    assert share.attained < found.attained  # the big tenant's are left out
    assert share.attainment == share.attained / 10


def test_the_engine_capacity_of_an_agent_mix_counts_each_turn_alone() -> None:
    # A mix of agent turns, cycled to the sample size, once put one task's
    # turns into the backlog twice and stopped on a duplicate request.
    engine = EngineSpec(profile("llama3-8b/h100"))
    turns = tuple(
        SimRequest(
            id=f"a{task}.{turn}",
            arrival=float(task),
            tenant="agent",
            prompt_tokens=1000 * (turn + 1),
            output_tokens=100,
            max_new_tokens=200,
            task=f"a{task}",
            turn=turn,
            turns=3,
            tool_wait=1.0 if turn else 0.0,
        )
        for task in range(4)
        for turn in range(3)
    )
    rate = saturated_cost_rate(turns, engine, sample=60)
    assert rate > 0
    found = in_share(Workload(turns, 10.0), engine)
    assert found.tenants == frozenset({"agent"})
