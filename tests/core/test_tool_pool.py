"""The tool pool, case by case: fairness, full queues, rate limits, timeouts,
rolling rates and the ladder signal, the tenant table, bad input."""

from __future__ import annotations

from typing import Any

import pytest

from slopolicy import ConfigError, Policy, PolicyConfig
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.health import health
from slopolicy.core.health.findings import Finding
from slopolicy.core.health.signals import EngineSignals
from slopolicy.core.reasons import Reason
from slopolicy.core.tools import (
    ToolLease,
    ToolLimits,
    ToolOutcome,
    ToolPool,
    ToolRefused,
    ToolSpec,
    ToolWaiting,
)
from slopolicy.errors import UsageError
from slopolicy.runtime.http import error_response


def _pool(**spec: Any) -> ToolPool:
    limits = {
        key: spec.pop(key)
        for key in ("tenant_max_concurrency", "max_tenants", "signal")
        if key in spec
    }
    return ToolPool(ToolLimits(tools={"search": ToolSpec("search", **spec)}, **limits))


def _lease(result: object) -> ToolLease:
    assert isinstance(result, ToolLease), result
    return result


def _waiting(result: object) -> ToolWaiting:
    assert isinstance(result, ToolWaiting), result
    return result


def test_a_freed_slot_goes_to_the_tenant_holding_fewest() -> None:
    pool = _pool(max_concurrency=2)
    held = [_lease(pool.acquire("a", "search", now=0.0)) for _ in range(2)]
    flood = [_waiting(pool.acquire("a", "search", now=0.0)) for _ in range(5)]
    b = _waiting(pool.acquire("b", "search", now=1.0))
    started = pool.release(held[0].id, now=2.0, outcome=ToolOutcome.OK)
    assert [lease.id for lease in started] == [b.id]  # ahead of a's five older waiters
    assert started[0].wait == 1.0
    # Then a and b share: b holds 1 and a 1; the next slot goes to a (b's is newer).
    started = pool.release(held[1].id, now=3.0, outcome=ToolOutcome.OK)
    assert [lease.id for lease in started] == [flood[0].id]


def test_fewest_held_comes_before_least_recently_served() -> None:
    pool = _pool(max_concurrency=4)
    a = [_lease(pool.acquire("a", "search", now=0.0)) for _ in range(3)]
    _lease(pool.acquire("b", "search", now=0.0))  # served after a, and holds fewer
    waiting_a = _waiting(pool.acquire("a", "search", now=0.0))
    waiting_b = _waiting(pool.acquire("b", "search", now=0.0))
    assert [lease.id for lease in pool.release(a[0].id, now=1.0, outcome=ToolOutcome.OK)] == [
        waiting_b.id
    ]
    # Now 2 each: the least recently served (a) goes first.
    assert [lease.id for lease in pool.release(a[1].id, now=1.0, outcome=ToolOutcome.OK)] == [
        waiting_a.id
    ]


def test_a_full_queue_pushes_out_the_most_backlogged_tenants_newest() -> None:
    pool = _pool(max_concurrency=1, max_waiting=3)
    _lease(pool.acquire("a", "search", now=0.0))
    flood = [_waiting(pool.acquire("a", "search", now=0.0)) for _ in range(3)]
    b = _waiting(pool.acquire("b", "search", now=0.0))
    assert b.displaced is not None
    assert b.displaced.id == flood[-1].id
    assert b.displaced.refusal.reason is Reason.QUEUE_FULL
    # a may not push b out (b has fewer waiting), so a's next arrival is refused.
    refused = pool.acquire("a", "search", now=0.0)
    assert isinstance(refused, ToolRefused)
    assert refused.reason is Reason.QUEUE_FULL
    assert refused.http_status == 503
    assert pool.waiting == 3


def test_rate_limits_refuse_with_the_wait_and_hold_nothing() -> None:
    pool = _pool(rate=2.0, burst=2.0, tenant_rate=1.0, tenant_burst=1.0)
    first = _lease(pool.acquire("a", "search", now=0.0))
    refused = pool.acquire("a", "search", now=0.0)  # a's own bucket is empty
    assert isinstance(refused, ToolRefused)
    assert refused.reason is Reason.RATE_LIMITED
    assert refused.retry_after == 1.0
    status, headers, body = error_response(refused)
    assert (status, headers["retry-after"], body["error"]["code"]) == (429, "1", "rate_limited")
    _lease(pool.acquire("b", "search", now=0.0))
    tool_empty = pool.acquire("c", "search", now=0.0)  # the tool's bucket is empty
    assert isinstance(tool_empty, ToolRefused)
    assert tool_empty.retry_after == 0.5
    assert pool.in_flight == 2
    pool.release(first.id, now=1.0, outcome=ToolOutcome.OK)
    _lease(pool.acquire("a", "search", now=1.0))


def test_tools_outside_the_limits_are_refused_unless_star_covers_them() -> None:
    pool = _pool()
    refused = pool.acquire("a", "fetch", now=0.0)
    assert isinstance(refused, ToolRefused)
    assert refused.reason is Reason.UNKNOWN_TOOL
    assert error_response(refused)[0] == 400
    covered = ToolPool(ToolLimits(tools={"*": ToolSpec("*", max_concurrency=1)}))
    lease = _lease(covered.acquire("a", "fetch", now=0.0))
    assert (lease.tool, lease.group) == ("fetch", "*")
    assert isinstance(covered.acquire("a", "other", now=0.0), ToolWaiting)  # one shared group


def test_the_tools_timeout_caps_the_callers() -> None:
    pool = _pool(timeout=2.0)
    assert _lease(pool.acquire("a", "search", now=10.0)).deadline == 12.0
    assert _lease(pool.acquire("a", "search", now=10.0, timeout=0.5)).timeout == 0.5
    assert _lease(pool.acquire("a", "search", now=10.0, timeout=5.0)).timeout == 2.0
    assert _lease(ToolPool().acquire("a", "x", now=0.0)).deadline is None


def test_rolling_rates_and_the_ladder_signal() -> None:
    pool = _pool(signal="timeouts")
    for outcome in [ToolOutcome.TIMEOUT] * 2 + [ToolOutcome.ERROR] + [ToolOutcome.OK] * 17:
        pool.release(_lease(pool.acquire("a", "search", now=0.0)).id, now=1.0, outcome=outcome)
    pool.release(
        _lease(pool.acquire("a", "search", now=1.0)).id, now=1.0, outcome=ToolOutcome.CANCELLED
    )
    stats = pool.statistics(now=1.0)
    assert (stats.timeout_rate, stats.error_rate) == (0.1, 0.05)  # cancelled not counted
    assert stats.tools[0].calls == 20
    assert pool.signal(now=1.0) == 0.1
    assert pool.signal(now=61.0) == 0.0  # the window has moved past them
    # Few calls: one timeout in two reads as 1 / min_calls, not 50 %.
    few = _pool(signal="failures")
    for outcome in (ToolOutcome.TIMEOUT, ToolOutcome.ERROR):
        few.release(_lease(few.acquire("a", "search", now=0.0)).id, now=0.0, outcome=outcome)
    assert few.signal(now=0.0) == 0.2
    assert _pool().signal(now=0.0) is None  # reports nothing unless asked


def _policy(tools: dict[str, Any]) -> Policy:
    config = PolicyConfig.from_dict({"tools": tools})
    return Policy(config, counter=HeuristicCounter())


def test_the_pools_rate_feeds_the_ladder_and_the_diagnoser_only_when_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[EngineSignals] = []

    def diagnose(snapshots: object, signals: EngineSignals, **_: object) -> list[Finding]:
        seen.append(signals)
        return []

    monkeypatch.setattr(health, "diagnose", diagnose)
    for signal, expected in (("off", 0.0), ("timeouts", 0.5)):
        policy = _policy({"ladder_signal": signal, "min_calls": 2})
        for outcome in (ToolOutcome.TIMEOUT, ToolOutcome.OK):
            lease = _lease(policy.tools.acquire("a", "search", now=1.0))
            policy.tools.release(lease.id, now=1.0, outcome=outcome)
        pressure = policy.health.pressure(now=1.0, kv_ledger=0.0, oldest_wait=0.0)
        assert pressure.tool_timeout_rate == expected
        policy.diagnose(now=1.0)
        assert seen.pop().tool_timeout_rate == (None if signal == "off" else expected)


def test_the_default_config_limits_no_tool() -> None:
    pool = Policy(PolicyConfig(), counter=HeuristicCounter()).tools
    leases = [_lease(pool.acquire("a", "anything", now=0.0)) for _ in range(100)]
    assert pool.in_flight == len(leases)
    assert pool.signal(now=0.0) is None


def test_the_tenant_table_drops_idle_tenants_and_refuses_past_it() -> None:
    pool = _pool(max_tenants=2, tenant_rate=1.0, tenant_burst=1.0)
    a = _lease(pool.acquire("a", "search", now=0.0))
    b = _lease(pool.acquire("b", "search", now=0.0))
    refused = pool.acquire("c", "search", now=0.0)
    assert isinstance(refused, ToolRefused)
    assert refused.reason is Reason.TENANT_TABLE_FULL
    pool.release(a.id, now=0.5, outcome=ToolOutcome.OK)
    assert isinstance(pool.acquire("c", "search", now=0.5), ToolRefused)  # a's bucket not full yet
    assert isinstance(pool.acquire("c", "search", now=1.0), ToolLease)  # a's is: a is dropped
    pool.release(b.id, now=1.0, outcome=ToolOutcome.OK)
    assert pool.statistics(now=1.0).tenants == 2


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p: p.acquire("", "search", now=0.0), "tenant"),
        (lambda p: p.acquire("a", 3, now=0.0), "tool"),
        (lambda p: p.acquire("a", "search", now=float("nan")), "now"),
        (lambda p: p.acquire("a", "search", now=0.0, timeout=0.0), "timeout"),
        (lambda p: p.acquire("a", "search", now=0.0, timeout=float("inf")), "timeout"),
        (lambda p: p.release(99, now=0.0, outcome=ToolOutcome.OK), "holds no slot"),
        (lambda p: p.release(1, now=0.0, outcome="ok"), "ToolOutcome"),
        (lambda p: p.withdraw(1, now=0.0), "not waiting"),
    ],
)
def test_bad_calls_raise_and_change_nothing(call: Any, message: str) -> None:
    pool = _pool(max_concurrency=1)
    _lease(pool.acquire("a", "search", now=0.0))
    before = pool.statistics(now=0.0)
    with pytest.raises(UsageError, match=message):
        call(pool)
    assert pool.statistics(now=0.0) == before


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ToolSpec(""), "name"),
        (lambda: ToolSpec("x", max_concurrency=0), "max_concurrency"),
        (lambda: ToolSpec("x", rate=1.0), "together"),
        (lambda: ToolSpec("x", rate=1.0, burst=0.5), "burst"),
        (lambda: ToolSpec("x", timeout=-1.0), "timeout"),
        (lambda: ToolLimits(tools={"x": ToolSpec("y")}), "named"),
        (lambda: ToolLimits(signal="loud"), "signal"),
        (lambda: ToolLimits(window=0.0), "window"),
        (lambda: ToolPool("limits"), "ToolLimits"),  # type: ignore[arg-type]
    ],
)
def test_bad_limits_raise(build: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        build()


@pytest.mark.parametrize(
    "tools",
    [
        {"limits": {"search": {"rate": 1.0}}},
        {"limits": {"bad name!": {}}},
        {"limits": {"search": {"tenant_burst": 0.5, "tenant_rate": 1.0}}},
        {"ladder_signal": "on"},
        {"window_s": 0},
    ],
)
def test_bad_tool_config_is_a_config_error(tools: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="tools"):
        PolicyConfig.from_dict({"tools": tools})
