"""Dispatch pacing: the GCRA pace on its own, and the policy starting queued
requests at ``engine.dispatch_rate`` in fair order."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import ConfigError, Policy, PolicyConfig, Request
from slopolicy.config.describe import describe
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.queueing.pacing import DispatchPace
from slopolicy.errors import UsageError


@pytest.mark.parametrize(
    ("rate", "burst"), [(0, 1), (-1, 1), (math.inf, 1), (math.nan, 1), (1, -1), (1, math.inf)]
)
def test_bad_settings_are_refused(rate: float, burst: float) -> None:
    with pytest.raises(UsageError):
        DispatchPace(rate, burst)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "1", True])
def test_bad_times_and_costs_are_refused_and_change_nothing(bad: object) -> None:
    pace = DispatchPace(rate=100.0, burst=0.0)
    pace.charge(50.0, now=1.0)
    for call in (
        lambda: pace.ready(now=bad),  # type: ignore[arg-type]
        lambda: pace.ready_at(now=bad),  # type: ignore[arg-type]
        lambda: pace.backlog(now=bad),  # type: ignore[arg-type]
        lambda: pace.charge(10.0, now=bad),  # type: ignore[arg-type]
        lambda: pace.charge(bad, now=1.0),  # type: ignore[arg-type]
        lambda: pace.settle(50.0, bad),  # type: ignore[arg-type]
    ):
        with pytest.raises(UsageError):
            call()
    with pytest.raises(UsageError):
        pace.charge(-1.0, now=1.0)
    assert pace.ready_at(now=1.0) == pytest.approx(1.5)  # as after the one good charge


def test_a_start_waits_until_the_backlog_is_one_burst() -> None:
    pace = DispatchPace(rate=100.0, burst=50.0)
    assert pace.ready(now=0.0)
    pace.charge(200.0, now=0.0)  # any size starts when ready: 2 s of backlog now
    assert pace.backlog(now=0.0) == pytest.approx(200.0)
    assert not pace.ready(now=1.0)
    assert pace.ready_at(now=1.0) == pytest.approx(1.5)  # backlog 50 = the burst
    assert pace.ready(now=1.5)
    pace.settle(200.0, 100.0)  # it cost half the estimate
    assert pace.ready_at(now=0.0) == pytest.approx(0.5)
    assert pace.backlog(now=5.0) == 0.0


@given(
    rate=st.floats(1.0, 1e6),
    burst_s=st.floats(0.0, 2.0),
    steps=st.lists(
        st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(0.5, 2.0)), max_size=60
    ),
)
def test_started_cost_in_any_interval_stays_within_the_bound(
    rate: float, burst_s: float, steps: list[tuple[float, float, float]]
) -> None:
    """rate * T + burst + the largest cost, over every interval between two
    starts, whatever the actual costs settled."""
    burst = rate * burst_s
    pace = DispatchPace(rate, burst)
    now, starts = 0.0, []
    for gap, size, actual_share in steps:
        now += gap
        cost = size * rate  # up to a second's worth
        if not pace.ready(now=now):
            now = pace.ready_at(now=now)
            assert pace.ready(now=now)
        pace.charge(cost, now=now)
        # The estimate was off by up to 2x either way: the pace follows the actual.
        pace.settle(cost, cost * actual_share)
        starts.append((now, cost * actual_share))
    largest = max((cost for _, cost in starts), default=0.0)
    for i, (begin, _) in enumerate(starts):
        total = 0.0
        for end, cost in starts[i:]:
            total += cost
            assert total <= rate * (end - begin) + burst + largest + 1e-6 * (1 + total)


def _policy(**engine: object) -> Policy:
    config = PolicyConfig.from_dict(
        {
            # Arrival order inside a tenant: these tests are of the pace alone.
            "lanes": [
                {
                    "name": "chat",
                    "queue_capacity": 100,
                    "max_queue_wait_s": 60.0,
                    "queue_order": "arrival",
                }
            ],
            "cost": {"alpha": 1.0, "beta": 0.0},
            "tiers": {"default": {"max_concurrency": 100}},
            "engine": {"max_running": 50, **engine},
            "ladder": {"enabled": False},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _submit(policy: Policy, name: str, tenant: str, cost: int, now: float = 0.0) -> None:
    request = Request(id=name, tenant=tenant, prompt_tokens=cost, max_new_tokens=1)
    assert policy.submit(request, now=now).accepted


def test_queued_requests_start_at_the_rate_in_fair_order() -> None:
    policy = _policy(dispatch_rate=100.0, dispatch_burst=0.0)
    for k in range(3):
        _submit(policy, f"a{k}", "a", 100)
        _submit(policy, f"b{k}", "b", 50)
    starts: list[tuple[float, str]] = []
    now = 0.0
    while True:
        starts.extend((now, s.id) for s in policy.dispatch(now=now).started)
        wake = policy.next_start()
        if wake is None:
            break
        assert wake > now
        now = wake
    # One start per wake-up, each once the ones before it are paid at 100 units/s...
    costs = {name: 100 if name.startswith("a") else 50 for _, name in starts}
    paid = [sum(costs[name] for _, name in starts[:k]) / 100 for k in range(len(starts))]
    assert [t for t, _ in starts] == pytest.approx(paid)
    # ...in the order fair dispatch gives without a pace.
    unpaced = _policy()
    for k in range(3):
        _submit(unpaced, f"a{k}", "a", 100)
        _submit(unpaced, f"b{k}", "b", 50)
    order = [s.id for s in unpaced.dispatch(now=0.0).started]
    assert [name for _, name in starts] == order
    assert order[:3] == ["a0", "b0", "b1"]  # b is charged half as much per request
    assert policy.next_start() is None  # nothing queued


def test_a_burst_starts_at_once_and_a_cheaper_actual_cost_pulls_the_next_start_in() -> None:
    policy = _policy(dispatch_rate=100.0, dispatch_burst=150.0)
    for k in range(4):
        _submit(policy, f"r{k}", "t", 100)
    assert [s.id for s in policy.dispatch(now=0.0).started] == ["r0", "r1"]
    assert policy.next_start() == pytest.approx(0.5)  # 200 started, 150 tolerated
    policy.finish("r0", now=0.1, output_tokens=0)  # cost 100 as estimated (beta is 0)
    assert policy.next_start() == pytest.approx(0.5)
    assert not policy.dispatch(now=0.4).started
    assert [s.id for s in policy.dispatch(now=0.5).started] == ["r2"]


def test_statistics_report_the_backlog_at_the_time_asked() -> None:
    policy = _policy(dispatch_rate=100.0, dispatch_burst=0.0)
    assert policy.statistics().dispatch_backlog == 0.0  # paced, nothing started yet
    _submit(policy, "a", "t", 100)
    policy.dispatch(now=0.0)
    assert policy.statistics().dispatch_backlog == pytest.approx(100.0)
    assert policy.statistics(now=0.25).dispatch_backlog == pytest.approx(75.0)
    assert policy.statistics(now=-5.0).dispatch_backlog == pytest.approx(100.0)  # never before now
    assert policy.next_start() is None  # a read: nothing queued, the clock did not move
    assert _policy().statistics().dispatch_backlog is None
    for bad in (math.nan, math.inf, "soon"):
        with pytest.raises(UsageError):
            policy.statistics(now=bad)  # type: ignore[arg-type]


def test_can_start_needs_a_free_slot_and_the_rate() -> None:
    paced = _policy(dispatch_rate=100.0, dispatch_burst=0.0, max_running=1)
    assert paced.can_start(now=0.0)
    for name in ("a", "b"):
        _submit(paced, name, "t", 100)
    paced.dispatch(now=0.0)
    assert not paced.can_start(now=0.5)  # the slot is taken (and the rate is 0.5 s short)
    paced.finish("a", now=0.5, output_tokens=0)
    assert not paced.can_start(now=0.5)  # a free slot, but 100 units at 100/s end at 1.0
    assert paced.can_start(now=1.0)
    assert _policy().can_start(now=0.0)  # no rate: a free slot is enough


def test_next_start_is_none_without_a_rate_or_with_the_engine_full() -> None:
    policy = _policy()
    _submit(policy, "a", "t", 10)
    assert policy.next_start() is None
    full = _policy(dispatch_rate=10.0, dispatch_burst=0.0, max_running=1)
    for name in ("a", "b"):
        _submit(full, name, "t", 100)
    assert [s.id for s in full.dispatch(now=0.0).started] == ["a"]
    assert full.next_start() is None  # b waits for a's slot: a finish dispatches


def test_the_burst_defaults_to_a_tenth_of_a_second_and_needs_a_rate() -> None:
    config = PolicyConfig.from_dict({"engine": {"dispatch_rate": 500.0}})
    assert "starts paced to 500 cost units/s, up to 50 ahead." in describe(config)
    pace = config.engine.build_pace()
    assert pace is not None
    assert (pace.rate, pace.burst) == (500.0, 50.0)
    assert PolicyConfig().engine.build_pace() is None
    with pytest.raises(ConfigError, match="dispatch_burst"):
        PolicyConfig.from_dict({"engine": {"dispatch_burst": 5.0}})
    with pytest.raises(ConfigError, match="dispatch_rate"):
        PolicyConfig.from_dict({"engine": {"dispatch_rate": 0}})


def test_a_start_the_dispatch_rate_holds_back_is_not_the_engine_s_saturation() -> None:
    """The rate is a contract the operator set, not the engine's limit: a
    queue waiting on it leaves the engine's saturation at 0, while a head
    the KV ledger holds counts (see ``tests/core/test_shed_share.py``)."""
    policy = _policy(dispatch_rate=100.0, dispatch_burst=0.0)
    for k in range(5):
        _submit(policy, f"r{k}", "t", 100)
    for tick in range(10):
        policy.dispatch(now=tick * 0.25)  # one start a second; the rest wait on the rate
    assert policy.running == 3
    assert policy.statistics(now=2.5).saturation == 0.0
