"""The ``shed`` rung takes from the tenants over their max-min share: of each,
the part of its requests beyond its share is refused, and a tenant within its
share queues as it would without the ladder (issue 18: over-share tenants
absorb the shedding; in-share tenants keep their attainment)."""

from __future__ import annotations

import math

import pytest

from slopolicy import Policy, PolicyConfig, Reason, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.decisions import Defer
from slopolicy.core.ladder.pressure import Pressure


def _policy(share_window_s: float | None = 10.0) -> Policy:
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": "chat", "slo": {"ttft_p95_s": 0.5}, "max_prompt_tokens": 1000},
                {"name": "batch", "max_prompt_tokens": 100_000, "max_queue_wait_s": 600},
            ],
            # These starts report no first token: no prefill budget holding them.
            "engine": {"max_running": 3, "share_window_s": share_window_s, "prefill_horizon_s": 0},
            "ladder": {"rungs": ["shed"], "dwell_s": 1.0, "cooldown_s": 100.0},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _batch(request_id: str, tenant: str) -> Request:
    return Request(id=request_id, tenant=tenant, prompt_tokens=5000, max_new_tokens=100)


def _saturate(policy: Policy) -> None:
    """``big`` fills the engine's three seats and queues 27 more; ``small``
    queues one: 31 asked, 3 served, ``small`` within its share, ``big`` far
    over; then the ladder climbs to ``shed``."""
    for index in range(30):
        assert policy.submit(_batch(f"big{index}", "big"), now=0.0).accepted
    assert policy.submit(_batch("small0", "small"), now=0.0).accepted
    assert len(policy.dispatch(now=0.0).started) == 3
    ladder = policy.health.ladder
    assert ladder is not None
    assert ladder.may_shed("batch")  # a rung would, once active
    assert not ladder.may_shed("chat")
    assert not ladder.sheds("batch")
    assert ladder.update(Pressure(kv_usage=0.99), now=1.0) is not None
    assert ladder.sheds("batch")
    assert not ladder.sheds("chat")


def test_shedding_refuses_the_over_share_tenants_part_and_queues_the_others() -> None:
    policy = _policy()
    _saturate(policy)
    # big's share is what is left of 3 served after small's 1: 2 of its 30
    # asked, so about 14 of every 15 of its requests are shed.
    big = [policy.submit(_batch(f"big-late{k}", "big"), now=2.0) for k in range(15)]
    shed = [d for d in big if isinstance(d, Defer)]
    assert 13 <= len(shed) <= 14
    assert all(d.reason is Reason.OVERLOAD_SHED for d in shed)
    assert "tenant 'big' asks for more than its fair share" in shed[0].message
    assert shed[0].retry_after is not None
    # small asked 1 of the 3 served: within its share, it queues.
    assert all(policy.submit(_batch(f"small{k}", "small"), now=2.0).accepted for k in range(1, 3))
    # A tenant the policy has not seen asks nothing yet: it queues.
    assert policy.submit(_batch("new0", "new"), now=2.0).accepted
    # The interactive lane is never shed.
    chat = Request(id="chat0", tenant="big", prompt_tokens=50, max_new_tokens=10)
    assert policy.submit(chat, now=2.0).accepted


def test_without_a_share_window_the_rung_sheds_the_whole_lane() -> None:
    policy = _policy(share_window_s=None)
    _saturate(policy)
    for tenant in ("big", "small", "new"):
        refused = policy.submit(_batch(f"{tenant}-late", tenant), now=2.0)
        assert isinstance(refused, Defer)
        assert refused.reason is Reason.OVERLOAD_SHED
        assert "fair share" not in refused.message


def test_a_tenant_over_its_share_in_the_spared_lane_loses_all_it_may_lose() -> None:
    policy = _policy()
    _saturate(policy)
    for index in range(30):  # chat is never shed, but counts toward talker's share
        chat = Request(id=f"chat{index}", tenant="talker", prompt_tokens=900, max_new_tokens=100)
        assert policy.submit(chat, now=2.0).accepted
    refused = [policy.submit(_batch(f"talker{k}", "talker"), now=3.0) for k in range(3)]
    assert all(isinstance(d, Defer) for d in refused)


def _protecting(rungs: list[str]) -> Policy:
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": "chat", "slo": {"ttft_p95_s": 0.5}, "max_prompt_tokens": 1000},
                {"name": "batch", "max_prompt_tokens": 100_000, "max_queue_wait_s": 600},
            ],
            "engine": {"max_running": 3, "share_window_s": 10.0, "prefill_horizon_s": 0},
            "ladder": {"rungs": rungs, "dwell_s": 1.0, "cooldown_s": 100.0},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def test_under_any_pressure_an_over_share_tenant_s_excess_goes_before_anyone_is_degraded() -> None:
    """At the first rung (favour chat) the ``shed`` rung is far off, but the
    over-share tenant's excess is refused already: some tenant is within its
    share, and refusing the excess protects it."""
    policy = _protecting(["favor_interactive", "drop_optional_features", "shed"])
    for index in range(30):
        assert policy.submit(_batch(f"big{index}", "big"), now=0.0).accepted
    assert policy.submit(_batch("small0", "small"), now=0.0).accepted
    assert len(policy.dispatch(now=0.0).started) == 3
    demand = policy.demand
    assert demand is not None
    assert demand.protects(now=1.0)
    ladder = policy.health.ladder
    assert ladder is not None
    assert ladder.update(Pressure(kv_usage=0.99), now=1.0) is not None
    assert ladder.level == 1
    assert not ladder.sheds("batch")
    big = [policy.submit(_batch(f"big-late{k}", "big"), now=1.5) for k in range(15)]
    shed = [d for d in big if isinstance(d, Defer)]
    assert 13 <= len(shed) <= 14
    assert all(d.reason is Reason.OVERLOAD_SHED for d in shed)
    assert "shed by share under pressure" in shed[0].message
    assert "tenant 'big' asks for more than its fair share" in shed[0].message
    assert all(policy.submit(_batch(f"small{k}", "small"), now=1.5).accepted for k in range(1, 3))
    chat = Request(id="chat0", tenant="big", prompt_tokens=50, max_new_tokens=10)
    assert policy.submit(chat, now=1.5).accepted  # the interactive lane is never shed


def test_a_lone_tenant_over_what_is_served_waits_for_the_shed_rung() -> None:
    policy = _protecting(["favor_interactive", "drop_optional_features", "shed"])
    for index in range(30):
        assert policy.submit(_batch(f"big{index}", "big"), now=0.0).accepted
    assert len(policy.dispatch(now=0.0).started) == 3
    demand = policy.demand
    assert demand is not None
    assert demand.level(now=1.0) < float("inf")  # over what is served...
    assert not demand.protects(now=1.0)  # ...but nobody to protect
    ladder = policy.health.ladder
    assert ladder is not None
    assert ladder.update(Pressure(kv_usage=0.99), now=1.0) is not None
    assert all(policy.submit(_batch(f"late{k}", "big"), now=1.5).accepted for k in range(5))


def test_without_pressure_nothing_is_refused_by_share() -> None:
    policy = _protecting(["favor_interactive", "shed"])
    for index in range(30):
        assert policy.submit(_batch(f"big{index}", "big"), now=0.0).accepted
    assert policy.submit(_batch("small0", "small"), now=0.0).accepted
    policy.dispatch(now=0.0)
    demand = policy.demand
    assert demand is not None
    assert demand.protects(now=1.0)
    assert all(policy.submit(_batch(f"late{k}", "big"), now=1.5).accepted for k in range(5))


def test_protection_waits_for_an_engine_that_holds_work_back() -> None:
    """Pressure on an engine that keeps up (a pool forecast near full, with
    every head started) refuses nobody by share: the shortfall the share
    estimate reads is work that expired, not work the engine had no room
    for. Once the engine holds work back again, the excess goes."""
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": "chat", "slo": {"ttft_p95_s": 0.5}, "max_prompt_tokens": 1000},
                {"name": "batch", "max_prompt_tokens": 100_000, "max_queue_wait_s": 5},
            ],
            "engine": {"max_running": 3, "share_window_s": 10.0, "prefill_horizon_s": 0},
            "ladder": {"rungs": ["favor_interactive", "shed"], "dwell_s": 1.0},
        }
    )
    policy = Policy(config, counter=HeuristicCounter())
    for index in range(30):
        assert policy.submit(_batch(f"big{index}", "big"), now=0.0).accepted
    assert policy.submit(_batch("small0", "small"), now=0.0).accepted
    started = policy.dispatch(now=0.0).started  # three seats: the rest held back
    for request in started:
        policy.finish(request.id, now=4.0, output_tokens=100)
    # The queue expires at 5 s; from 6 s on the engine has room and nothing waits.
    assert len(policy.dispatch(now=6.0).expired) == 28
    assert policy.dispatch(now=6.0).started == ()
    saturation, demand, ladder = policy.saturation, policy.demand, policy.health.ladder
    assert saturation is not None
    assert demand is not None
    assert ladder is not None
    assert saturation.fraction(now=20.0) < 0.2
    assert demand.protects(now=20.0)  # big still reads as far over its share
    assert ladder.update(Pressure(kv_usage=0.99), now=20.0) is not None
    assert ladder.level == 1
    assert all(policy.submit(_batch(f"late{k}", "big"), now=20.5).accepted for k in range(5))
    # The engine holds work back again (its three seats taken, two queued):
    # after a few seconds of it, big's excess is refused by share.
    assert len(policy.dispatch(now=20.5).started) == 3
    assert saturation.fraction(now=30.0) > 0.5
    assert demand.protects(now=30.0)
    refused = [policy.submit(_batch(f"later{k}", "big"), now=30.0) for k in range(10)]
    assert any(
        isinstance(d, Defer) and "shed by share under pressure" in d.message for d in refused
    )


def test_the_statistics_report_the_engine_s_saturation() -> None:
    policy = _policy()
    assert policy.statistics().saturation == 0.0  # nothing dispatched yet
    for index in range(4):
        assert policy.submit(_batch(f"r{index}", "a"), now=0.0).accepted
    assert len(policy.dispatch(now=0.0).started) == 3  # every seat taken
    assert policy.statistics(now=5.0).saturation == 1.0
    for request_id in ("r0", "r1", "r2"):
        policy.finish(request_id, now=5.0, output_tokens=10)
    assert len(policy.dispatch(now=5.0).started) == 1  # room again, nothing held back
    assert policy.statistics(now=5.0).saturation == 1.0
    later = policy.statistics(now=15.0).saturation
    assert later is not None
    assert later == pytest.approx(
        (math.exp(-10.0 / 10.0) - math.exp(-15.0 / 10.0)) / (1.0 - math.exp(-15.0 / 10.0))
    )
    assert policy.statistics(now=15.0) == policy.statistics(now=15.0)  # a pure read
    assert _policy(share_window_s=None).statistics().saturation is None
