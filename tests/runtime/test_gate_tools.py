"""``gate.tool``: fair waiting, timeouts, exactly-once release under random
cancellation and failure, on asyncio and trio (virtual time)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.bench_tools import Flood, measure, p99, table
from slopolicy import (
    Gate,
    GateClosed,
    Policy,
    PolicyConfig,
    Rejected,
    ToolCall,
    ToolOutcome,
    ToolTimeout,
    UsageError,
)
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.runtime.http import error_response
from slopolicy.telemetry import names as n
from tests.telemetry.otel import Otel

pytestmark = pytest.mark.anyio

TOOLS = {
    "limits": {
        "search": {
            "max_concurrency": 2, "tenant_max_concurrency": 1, "timeout_s": 1.5,
            "max_wait_s": 1.0, "max_waiting": 4, "tenant_rate": 8.0, "tenant_burst": 3.0,
        },
        "*": {"max_concurrency": 1},
    },
    "tenant_max_concurrency": 2,
}  # fmt: skip


def _gate(tools: dict[str, Any] = TOOLS, **options: Any) -> Gate:
    config = PolicyConfig.from_dict({"tools": tools, "ladder": {"enabled": False}})
    return Gate(Policy(config, counter=HeuristicCounter()), **options)


class ToolFailed(Exception):
    """The tool itself failed."""


async def test_a_flooding_tenant_moves_anothers_wait_only_within_its_fair_share() -> None:
    flood = Flood(slots=4, workers=24, b_calls=30)
    alone = await measure(flood, fair=True, a=False)
    fair = await measure(flood, fair=True, a=True)
    plain = await measure(flood, fair=False, a=True)
    assert p99(alone.b_waits) == 0.0
    # B holds fewer slots than A, so the next slot that frees is B's: it
    # waits at most one of A's calls, however many A has waiting.
    assert p99(fair.b_waits) <= flood.a_call_s
    # First come, first served makes B wait behind A's queue: the bound is not free.
    assert p99(plain.b_waits) >= 4 * flood.a_call_s
    assert fair.a_rate >= 0.75 * plain.a_rate  # A keeps most of the tool meanwhile
    results = {(True, False): alone, (True, True): fair, (False, False): alone}
    lines = table(flood, {**results, (False, True): plain})
    assert len(lines) == 4
    assert lines[2].split()[-1] == f"{fair.a_rate:.2f}"


async def test_a_timeout_cancels_the_body_raises_and_counts() -> None:
    async with _gate() as gate:
        start = gate.clock()
        with pytest.raises(ToolTimeout) as caught:
            async with gate.tool(tenant="a", name="search", timeout_s=5.0) as call:
                await anyio.sleep(10)
        assert gate.clock() - start == pytest.approx(1.5)  # the tool's timeout is shorter
        assert caught.value.timeout == 1.5
        assert call.outcome is ToolOutcome.TIMEOUT
        assert call.time_s == pytest.approx(1.5)
        status, _, body = error_response(caught.value)
        assert (status, body["error"]["code"]) == (504, "tool_timeout")
        stats = gate.policy.tools.statistics(now=gate.clock())
        assert stats.tools[0].ended[ToolOutcome.TIMEOUT] == 1
        assert stats.in_flight == 0


async def test_the_bodys_error_propagates_and_counts_as_an_error() -> None:
    async with _gate() as gate:
        call = gate.tool(tenant="a", name="fetch")
        with pytest.raises(ToolFailed):
            await _fail_in(call, 0.25)
        assert call.outcome is ToolOutcome.ERROR
        assert call.duration_s == 0.25
        assert gate.policy.tools.statistics(now=gate.clock()).error_rate == 0.1


async def test_waiting_reports_its_time_and_expires_at_max_wait() -> None:
    one = {"limits": {"search": {"max_concurrency": 1, "max_wait_s": 1.0}}}
    async with _gate(one) as gate, anyio.create_task_group() as group:
        group.start_soon(_hold, gate, "a", 0.75)
        await anyio.sleep(0.1)
        async with gate.tool(tenant="c", name="search") as call:
            assert call.wait_s == pytest.approx(0.65)
        group.start_soon(_hold, gate, "a", 3.0)
        await anyio.sleep(0.1)
        with pytest.raises(Rejected) as caught:
            await _hold(gate, "c", 0.0)
        assert caught.value.reason.code == "expired"
        assert caught.value.http_status == 503
        assert gate.clock() == pytest.approx(0.75 + 0.1 + 1.0)
        group.cancel_scope.cancel()


async def _fail_in(call: ToolCall, seconds: float) -> None:
    async with call:
        await anyio.sleep(seconds)
        raise ToolFailed


async def _hold(gate: Gate, tenant: str, seconds: float, name: str = "search") -> None:
    async with gate.tool(tenant=tenant, name=name):
        await anyio.sleep(seconds)


async def test_refusals_raise_rejected_with_their_http_status() -> None:
    async with _gate({"limits": {"search": {"rate": 1.0, "burst": 1.0}}}) as gate:
        async with gate.tool(tenant="a", name="search"):
            pass
        with pytest.raises(Rejected) as caught:
            async with gate.tool(tenant="a", name="search"):
                pass
        assert (caught.value.code, caught.value.http_status) == ("rate_limited", 429)
        assert caught.value.retry_after == pytest.approx(1.0)
        with pytest.raises(Rejected) as caught:
            async with gate.tool(tenant="a", name="unlisted"):
                pass
        assert (caught.value.code, caught.value.http_status) == ("unknown_tool", 400)


async def test_closing_the_gate_wakes_waiters_with_gate_closed() -> None:
    results: list[str] = []

    async def waiter(gate: Gate) -> None:
        try:
            async with gate.tool(tenant="b", name="fetch"):
                results.append("ran")
        except GateClosed:
            results.append("closed")

    gate = _gate()
    with pytest.raises(UsageError, match="enter the gate"):
        async with gate.tool(tenant="a", name="fetch"):
            pass
    async with anyio.create_task_group() as group, gate:
        group.start_soon(_hold, gate, "a", 1.0, "fetch")
        await anyio.sleep(0.1)
        group.start_soon(waiter, gate)
        await anyio.sleep(0.1)
    assert results == ["closed"]
    assert gate.policy.tools.waiting == 0
    with pytest.raises(GateClosed):
        async with gate.tool(tenant="a", name="fetch"):
            pass


async def test_a_call_cannot_be_entered_twice() -> None:
    async with _gate() as gate:
        call = gate.tool(tenant="a", name="fetch")
        async with call:
            pass
        with pytest.raises(UsageError, match="once"):
            async with call:
                pass


async def test_tool_telemetry_reports_configured_names_only() -> None:
    otel = Otel()
    try:
        async with _gate(telemetry=otel.telemetry()) as gate:
            async with gate.tool(tenant="a", name="search"):
                await anyio.sleep(0.5)
            async with gate.tool(tenant="a", name="some-unlisted-tool"):
                pass
            for _ in range(3):  # a's tenant_burst: 3 at once
                await _hold(gate, "a", 0.0)
            with pytest.raises(Rejected):
                await _hold(gate, "a", 0.0)
        metrics = otel.metrics()
    finally:
        otel.shutdown()
    calls = metrics[n.TOOL_CALLS]
    names = {dict(attrs)[n.TOOL] for attrs in calls.attribute_sets()}
    assert names == {"search", "*"}
    assert calls.value(slopolicy__tool__name="*", slopolicy__tool__result="ok") == 1
    assert metrics[n.TOOL_DURATION].histogram(
        slopolicy__tool__name="search", slopolicy__tool__result="ok"
    ).sum == pytest.approx(0.5 + 0.0 + 0.0)
    assert metrics[n.TOOL_WAIT].unit == "s"


@dataclass(frozen=True, slots=True)
class Plan:
    arrive: float
    tenant: str
    tool: str
    seconds: float
    fail: bool
    cancel_after: float | None
    timeout_s: float | None


_TIMES = st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.0])
plans = st.builds(
    Plan,
    arrive=_TIMES,
    tenant=st.sampled_from(["a", "b", "c"]),
    tool=st.sampled_from(["search", "fetch", "db"]),
    seconds=_TIMES,
    fail=st.booleans(),
    cancel_after=st.none() | _TIMES,
    timeout_s=st.none() | _TIMES.filter(bool),
)


async def _client(gate: Gate, plan: Plan, seen: Counter[str]) -> None:
    await anyio.sleep(plan.arrive)
    entered = False
    with anyio.CancelScope() as scope:
        if plan.cancel_after is not None:
            scope.deadline = gate.clock() + plan.cancel_after
        try:
            async with gate.tool(tenant=plan.tenant, name=plan.tool, timeout_s=plan.timeout_s):
                entered = True
                await anyio.sleep(plan.seconds)
                if plan.fail:
                    raise ToolFailed
            seen["ok"] += 1
            return
        except ToolTimeout:
            seen["timeout"] += 1
            return
        except ToolFailed:
            seen["error"] += 1
            return
        except Rejected as refused:
            seen[f"refused:{refused.code}"] += 1
            return
    seen["cancelled running" if entered else "cancelled waiting"] += 1


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(plans, min_size=1, max_size=16))
async def test_every_slot_is_released_exactly_once(plan: list[Plan]) -> None:
    seen: Counter[str] = Counter()
    async with _gate() as gate:
        async with anyio.create_task_group() as group:
            for each in plan:
                group.start_soon(_client, gate, each, seen)
        pool = gate.policy.tools
        stats = pool.statistics(now=gate.clock())
    assert (stats.in_flight, stats.waiting) == (0, 0)
    assert sum(seen.values()) == len(plan)
    started = sum(tool.started for tool in stats.tools)
    ended: Counter[ToolOutcome] = Counter()
    for tool in stats.tools:
        ended.update(tool.ended)
    assert started == sum(ended.values())  # each slot given back once
    assert ended[ToolOutcome.OK] == seen["ok"]
    assert ended[ToolOutcome.ERROR] == seen["error"]
    assert ended[ToolOutcome.TIMEOUT] == seen["timeout"]
    # A call granted in the instant its caller was cancelled gives its slot
    # back without the caller having entered the block.
    cancelled = ended[ToolOutcome.CANCELLED]
    assert seen["cancelled running"] <= cancelled
    assert cancelled <= seen["cancelled running"] + seen["cancelled waiting"]
    assert set(seen) <= {
        "ok", "error", "timeout", "cancelled running", "cancelled waiting",
        "refused:expired", "refused:queue_full", "refused:rate_limited",
    }  # fmt: skip
