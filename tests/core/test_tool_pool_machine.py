"""The tool pool against a naive model: caps never exceeded, every slot
released exactly once, refused calls change nothing, no slot idle while a
waiter fits, and a full queue pushes out only a more backlogged tenant."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

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

LIMITS = ToolLimits(
    tools={
        "search": ToolSpec(
            "search", max_concurrency=3, tenant_max_concurrency=2, rate=4.0, burst=4.0,
            max_waiting=4,
        ),
        "db": ToolSpec("db", max_concurrency=2, tenant_rate=2.0, tenant_burst=2.0, max_waiting=3),
        "*": ToolSpec("*", tenant_max_concurrency=1, max_waiting=2),
    },
    tenant_max_concurrency=3,
    max_tenants=3,
)  # fmt: skip
TENANTS = ("a", "b", "c", "d")
TOOLS = ("search", "db", "fetch", "other")
GROUP = {"search": "search", "db": "db", "fetch": "*", "other": "*"}


@dataclass
class Model:
    held: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (tenant, group)
    waiting: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (tenant, group)

    def count(
        self, where: dict[int, tuple[str, str]], tenant: str | None, group: str | None
    ) -> int:
        return sum(
            1
            for t, g in where.values()
            if (tenant is None or t == tenant) and (group is None or g == group)
        )

    def fits(self, tenant: str, group: str) -> bool:
        spec = LIMITS.tools[group]
        if (
            spec.max_concurrency is not None
            and self.count(self.held, None, group) >= spec.max_concurrency
        ):
            return False
        cap = spec.tenant_max_concurrency
        if cap is not None and self.count(self.held, tenant, group) >= cap:
            return False
        cap = LIMITS.tenant_max_concurrency
        return cap is None or self.count(self.held, tenant, None) < cap


def _state(pool: ToolPool, now: float) -> object:
    """Everything a refused call must leave as it was (refusal counts aside)."""
    stats = pool.statistics(now=now)
    levels: list[tuple[str, str, float]] = []
    for name, group in pool._groups.items():
        if group.bucket is not None:
            levels.append((name, "", group.bucket.level(now=now)))
        levels.extend((name, t, b.level(now=now)) for t, b in sorted(group.tenant_buckets.items()))
    tools = [(t.name, t.in_flight, t.waiting, t.started, dict(t.ended)) for t in stats.tools]
    return (stats.in_flight, stats.waiting, stats.tenants, tools, levels)


class ToolPoolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.pool = ToolPool(LIMITS)
        self.model = Model()
        self.now = 0.0
        self.released: list[int] = []

    def _started(self, leases: tuple[ToolLease, ...]) -> None:
        for lease in leases:
            assert lease.id in self.model.waiting, "a start for a call that was not waiting"
            tenant, group = self.model.waiting.pop(lease.id)
            assert (lease.tenant, lease.group) == (tenant, group)
            assert lease.started_at == self.now
            self.model.held[lease.id] = (tenant, group)

    @rule(tenant=st.sampled_from(TENANTS), tool=st.sampled_from(TOOLS))
    def acquire(self, tenant: str, tool: str) -> None:
        group = GROUP[tool]
        before = _state(self.pool, self.now)
        fits = self.model.fits(tenant, group)
        result = self.pool.acquire(tenant, tool, now=self.now)
        if isinstance(result, ToolRefused):
            assert _state(self.pool, self.now) == before, "a refused call changed the pool"
            assert result.reason in (
                Reason.RATE_LIMITED, Reason.QUEUE_FULL, Reason.TENANT_TABLE_FULL,
            )  # fmt: skip
            if result.reason is Reason.RATE_LIMITED:
                assert result.retry_after is not None
                assert result.retry_after > 0
                assert result.http_status == 429
            return
        if isinstance(result, ToolLease):
            assert fits, "granted past a cap"
            assert result.group == group
            assert result.wait == 0
            self.model.held[result.id] = (tenant, group)
            return
        assert isinstance(result, ToolWaiting)
        assert not fits, "queued although it fit"
        if result.displaced is not None:
            victim, victim_group = self.model.waiting.pop(result.displaced.id)
            assert victim_group == group
            assert victim != tenant
            own = self.model.count(self.model.waiting, tenant, group)
            assert self.model.count(self.model.waiting, victim, group) + 1 > own + 1
            assert result.displaced.refusal.reason is Reason.QUEUE_FULL
        self.model.waiting[result.id] = (tenant, group)

    @precondition(lambda self: self.model.held)
    @rule(data=st.data(), outcome=st.sampled_from(list(ToolOutcome)))
    def release(self, data: st.DataObject, outcome: ToolOutcome) -> None:
        call = data.draw(st.sampled_from(sorted(self.model.held)))
        del self.model.held[call]
        self._started(self.pool.release(call, now=self.now, outcome=outcome))
        self.released.append(call)

    @precondition(lambda self: self.released)
    @rule(data=st.data())
    def release_twice(self, data: st.DataObject) -> None:
        call = data.draw(st.sampled_from(self.released))
        before = _state(self.pool, self.now)
        with pytest.raises(UsageError):
            self.pool.release(call, now=self.now, outcome=ToolOutcome.OK)
        with pytest.raises(UsageError):
            self.pool.withdraw(call, now=self.now)
        assert _state(self.pool, self.now) == before

    @precondition(lambda self: self.model.waiting)
    @rule(data=st.data(), expired=st.booleans())
    def withdraw(self, data: st.DataObject, expired: bool) -> None:
        call = data.draw(st.sampled_from(sorted(self.model.waiting)))
        tenant, group = self.model.waiting.pop(call)
        state = self.pool._groups[group]
        buckets = [state.bucket, state.tenant_buckets.get(tenant)]
        before = [None if b is None else b.level(now=self.now) for b in buckets]
        self.pool.withdraw(call, now=self.now, expired=expired)
        for bucket, level in zip(buckets, before, strict=True):
            if bucket is not None and level is not None:  # its rate token is given back
                assert bucket.level(now=self.now) == min(bucket.burst, level + 1)

    @rule(dt=st.integers(0, 16).map(lambda n: n / 8))
    def advance(self, dt: float) -> None:
        self.now += dt

    @invariant()
    def caps_hold(self) -> None:
        for group, spec in LIMITS.tools.items():
            if spec.max_concurrency is not None:
                assert self.model.count(self.model.held, None, group) <= spec.max_concurrency
            for tenant in TENANTS:
                cap = spec.tenant_max_concurrency
                assert cap is None or self.model.count(self.model.held, tenant, group) <= cap
        for tenant in TENANTS:
            assert self.model.count(self.model.held, tenant, None) <= 3

    @invariant()
    def agrees_with_the_model(self) -> None:
        stats = self.pool.statistics(now=self.now)
        assert stats.in_flight == len(self.model.held)
        assert stats.waiting == len(self.model.waiting)
        for tool in stats.tools:
            assert tool.in_flight == self.model.count(self.model.held, None, tool.name)
            assert tool.waiting == self.model.count(self.model.waiting, None, tool.name)
            ended = sum(tool.ended.values())
            assert tool.started == tool.in_flight + ended  # each slot given back once

    @invariant()
    def the_tenant_table_keeps_only_live_or_bucketed_tenants(self) -> None:
        busy = {tenant for tenant, _ in [*self.model.held.values(), *self.model.waiting.values()]}
        kept = set(self.pool._tenants)
        assert busy <= kept
        assert kept - busy == set(self.pool._idle)  # every idle one is on the idle list
        assert len(kept) <= LIMITS.max_tenants

    @invariant()
    def no_slot_idle_while_a_waiter_fits(self) -> None:
        for tenant, group in self.model.waiting.values():
            assert not self.model.fits(tenant, group)

    def teardown(self) -> None:
        # Everything comes back: release and withdraw all, and the pool is empty.
        while self.model.held or self.model.waiting:
            if self.model.held:
                call = min(self.model.held)
                del self.model.held[call]
                self._started(self.pool.release(call, now=self.now, outcome=ToolOutcome.OK))
            else:
                call = min(self.model.waiting)
                del self.model.waiting[call]
                self.pool.withdraw(call, now=self.now)
        stats = self.pool.statistics(now=self.now)
        assert (stats.in_flight, stats.waiting) == (0, 0)


ToolPoolMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestToolPool = ToolPoolMachine.TestCase
