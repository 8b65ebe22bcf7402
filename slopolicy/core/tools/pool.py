"""The tool pool: per-tenant and per-tool caps, rate limits and fair waiting for tool calls.

Sans-IO like the rest of the core: every call takes ``now`` (monotonic
seconds; an earlier one than seen counts as the latest seen) and returns
values. A host brackets each tool or retriever call it makes between turns::

    result = pool.acquire("acme", "search", now=t)   # ToolLease | ToolWaiting | ToolRefused
    ...                                              # a waiter starts when a release returns it
    started = pool.release(lease.id, now=t, outcome=ToolOutcome.OK)
    risk = pool.risk(["search", "search"], now=t)     # a request's tool_risk, 0-1

Rate limits (calls per second, per tool and per tenant in a tool) are
contract limits: a call they cannot take now is refused ``rate_limited`` with
the wait. Concurrency caps (per tool, per tenant in a tool, per tenant over
all tools) make a call wait. Waiting is fair between tenants: a freed slot
goes to the waiting tenant that holds the fewest of the tool's slots (the
least recently served among equals), so a tenant that floods a tool gets its
share, not everyone's. A full queue pushes out the newest waiter of the
tenant with the most waiting, if that tenant has more than the arrival's
would have, before it refuses anyone (``queue_full``).

Each lease is released exactly once; a second release, or a withdrawal of a
call that is not waiting, raises :class:`UsageError` and changes nothing.
Bad arguments raise before anything changes.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable

from slopolicy.core.checks import check_now, shown
from slopolicy.core.reasons import Reason
from slopolicy.core.tools.calls import (
    ToolDisplaced,
    ToolLease,
    ToolOutcome,
    ToolPoolStatistics,
    ToolRefused,
    ToolWaiting,
)
from slopolicy.core.tools.limits import ToolLimits, check_call
from slopolicy.core.tools.rates import RollingRates
from slopolicy.core.tools.risk import calls_per_tool, combined, tool_risk
from slopolicy.core.tools.slots import buckets_for, fairest, has_room, pushed_out
from slopolicy.core.tools.snapshot import pool_statistics
from slopolicy.core.tools.state import Group, TenantCalls, Waiter
from slopolicy.errors import UsageError

__all__ = ("ToolPool",)


class ToolPool:
    """Slots, rate limits and fair queues for tool calls (see the module docstring).

    Args:
        limits: the :class:`ToolLimits` to enforce (default: none).
        now: the time the rate buckets start full at (monotonic seconds).
    """

    __slots__ = (
        "_groups",
        "_idle",
        "_ids",
        "_leases",
        "_limits",
        "_now",
        "_rates",
        "_seq",
        "_tenants",
        "_unknown",
        "_waiters",
    )

    def __init__(self, limits: ToolLimits | None = None, *, now: float = 0.0) -> None:
        check_now(now)
        self._limits = limits if limits is not None else ToolLimits()
        if not isinstance(self._limits, ToolLimits):
            raise UsageError(f"limits must be ToolLimits, not {shown(limits)}")
        self._groups = {
            name: Group(spec, self._limits, now=now) for name, spec in self._limits.tools.items()
        }
        self._tenants: dict[str, TenantCalls] = {}
        # Tenants kept idle for their rate buckets, oldest first (insertion order).
        self._idle: dict[str, None] = {}
        self._leases: dict[int, ToolLease] = {}
        self._waiters: dict[int, Waiter] = {}
        self._ids = itertools.count(1)
        self._seq = itertools.count(1)
        self._rates = RollingRates(self._limits.window, self._limits.min_calls)
        self._unknown = 0
        self._now = float(now)

    @property
    def limits(self) -> ToolLimits:
        """The limits this pool enforces."""
        return self._limits

    def _advance(self, now: float) -> float:
        check_now(now)
        if now > self._now:
            self._now = float(now)
        return self._now

    # -- acquire -------------------------------------------------------------

    def acquire(
        self, tenant: str, tool: str, *, now: float, timeout: float | None = None
    ) -> ToolLease | ToolWaiting | ToolRefused:
        """Ask for a slot for ``tenant``'s call of ``tool`` at ``now``.

        Returns a :class:`ToolLease` when it may start now, a
        :class:`ToolWaiting` when it must wait (a later :meth:`release` returns
        its lease), or a :class:`ToolRefused` (nothing held). ``timeout``
        (seconds) is how long the call may run, capped by the tool's own.
        """
        check_call(tenant, tool, timeout)
        now = self._advance(now)
        spec = self._limits.spec(tool)
        if spec is None:
            self._unknown += 1
            known = ", ".join(repr(name) for name in self._limits.tools) or "none"
            return ToolRefused(
                reason=Reason.UNKNOWN_TOOL,
                message=f"no limits cover tool {tool!r} (configured: {known})",
                http_status=400,
                tenant=tenant,
                tool=tool,
            )
        group = self._groups[spec.name]
        state = self._tenants.get(tenant)
        buckets = buckets_for(group, tenant, now=now)
        wait = max((bucket.time_until(1.0, now=now) for bucket in buckets), default=0.0)
        if wait > 0:
            return self._refused(
                group, tenant, tool, Reason.RATE_LIMITED, 429,
                f"tool {spec.name!r} is rate limited for tenant {tenant!r}", retry_after=wait,
            )  # fmt: skip
        if spec.timeout is not None:
            timeout = spec.timeout if timeout is None else min(timeout, spec.timeout)
        fits = has_room(group, self._limits, tenant, state)
        victim = None
        if not fits and group.waiting >= spec.max_waiting:
            victim = pushed_out(group, tenant)
            if victim is None:
                return self._refused(
                    group, tenant, tool, Reason.QUEUE_FULL, 503,
                    f"{group.waiting} calls already wait for tool {spec.name!r}",
                )  # fmt: skip
        # Last, so that sweeping idle tenants out happens only for a call that is taken.
        full = state is None and len(self._tenants) >= self._limits.max_tenants
        if full and not self._sweep(now):
            return self._refused(
                group, tenant, tool, Reason.TENANT_TABLE_FULL, 503,
                f"the tool pool keeps {self._limits.max_tenants} tenants and none is idle",
            )  # fmt: skip
        # Checked: from here on, it is taken.
        for bucket in buckets:
            bucket._try_acquire(1.0, now)
        if buckets and buckets[-1] is not group.bucket:
            group.tenant_buckets[tenant] = buckets[-1]
        if state is None:
            state = self._tenants[tenant] = TenantCalls()
        else:
            self._idle.pop(tenant, None)
        call = next(self._ids)
        if fits:
            waiter = Waiter(call, tenant, tool, spec.name, now, timeout, ())
            return self._grant(group, state, waiter, now)
        displaced = None if victim is None else self._displace(group, victim, now)
        waiter = Waiter(call, tenant, tool, spec.name, now, timeout, buckets)
        group.queues.setdefault(tenant, deque()).append(waiter)
        group.waiting += 1
        state.waiting += 1
        self._waiters[call] = waiter
        return ToolWaiting(
            id=call,
            tenant=tenant,
            tool=tool,
            group=spec.name,
            queued_at=now,
            deadline=None if spec.max_wait is None else now + spec.max_wait,
            displaced=displaced,
        )

    def _displace(self, group: Group, tenant: str, now: float) -> ToolDisplaced:
        queue = group.queues[tenant]
        waiter = queue.pop()
        self._unqueue(group, waiter, queue, now)
        refusal = self._refused(
            group, waiter.tenant, waiter.tool, Reason.QUEUE_FULL, 503,
            f"pushed out of tool {group.spec.name!r}'s full queue by another tenant's call",
        )  # fmt: skip
        return ToolDisplaced(id=waiter.id, refusal=refusal)

    def _refused(
        self,
        group: Group,
        tenant: str,
        tool: str,
        reason: Reason,
        status: int,
        message: str,
        retry_after: float | None = None,
    ) -> ToolRefused:
        group.refused[reason] = group.refused.get(reason, 0) + 1
        return ToolRefused(
            reason=reason,
            message=message,
            http_status=status,
            tenant=tenant,
            tool=tool,
            retry_after=retry_after,
        )

    def _grant(self, group: Group, state: TenantCalls, waiter: Waiter, now: float) -> ToolLease:
        tenant = waiter.tenant
        group.in_flight += 1
        group.held[tenant] = group.held.get(tenant, 0) + 1
        group.served[tenant] = next(self._seq)
        group.started += 1
        state.in_flight += 1
        lease = ToolLease(
            id=waiter.id,
            tenant=tenant,
            tool=waiter.tool,
            group=group.spec.name,
            queued_at=waiter.queued_at,
            started_at=now,
            timeout=waiter.timeout,
        )
        self._leases[waiter.id] = lease
        return lease

    # -- release and withdraw ------------------------------------------------

    def release(self, call: int, *, now: float, outcome: ToolOutcome) -> tuple[ToolLease, ...]:
        """Give back the slot of lease ``call`` at ``now``; ``outcome`` is how the
        call ended. Returns the waiting calls that start in the slots it freed."""
        if not isinstance(outcome, ToolOutcome):
            raise UsageError(f"outcome must be a ToolOutcome, not {shown(outcome)}")
        lease = self._leases.get(call) if isinstance(call, int) else None
        if lease is None:
            raise UsageError(f"tool call {shown(call)} holds no slot (released, or never granted)")
        now = self._advance(now)
        del self._leases[call]
        group = self._groups[lease.group]
        tenant = lease.tenant
        state = self._tenants[tenant]
        group.in_flight -= 1
        held = group.held[tenant] - 1
        if held:
            group.held[tenant] = held
        else:
            del group.held[tenant]
        state.in_flight -= 1
        group.ended[outcome] += 1
        if outcome is not ToolOutcome.CANCELLED:  # a cancelled call says nothing of the tool
            timeout, error = outcome is ToolOutcome.TIMEOUT, outcome is ToolOutcome.ERROR
            ran = now - lease.started_at
            group.rates.record(now=now, timeout=timeout, error=error, seconds=ran)
            self._rates.record(now=now, timeout=timeout, error=error, seconds=ran)
        groups: Iterable[Group] = (group,)
        if self._limits.tenant_max_concurrency is not None and state.waiting:
            groups = self._groups.values()  # its own waiters for other tools may fit now
        started = [lease for each in groups for lease in self._fill(each, now)]
        self._forget(tenant, state)
        return tuple(started)

    def _fill(self, group: Group, now: float) -> list[ToolLease]:
        """Start waiters of ``group`` while slots allow, fairest tenant first."""
        started: list[ToolLease] = []
        queues = group.queues
        while queues:
            best = fairest(group, self._limits, self._tenants)
            if best is None:
                break
            queue = queues[best]
            waiter = queue.popleft()
            if not queue:
                del queues[best]
            group.waiting -= 1
            state = self._tenants[best]
            state.waiting -= 1
            del self._waiters[waiter.id]
            started.append(self._grant(group, state, waiter, now))
        return started

    def withdraw(self, call: int, *, now: float, expired: bool = False) -> None:
        """Take waiting call ``call`` out of its queue at ``now`` (its caller gave
        up; ``expired``: its ``deadline`` passed, counted as refused ``expired``).
        Its rate tokens are given back."""
        waiter = self._waiters.get(call) if isinstance(call, int) else None
        if waiter is None:
            raise UsageError(f"tool call {shown(call)} is not waiting")
        now = self._advance(now)
        group = self._groups[waiter.group]
        queue = group.queues[waiter.tenant]
        queue.remove(waiter)
        self._unqueue(group, waiter, queue, now)
        if expired:
            group.refused[Reason.EXPIRED] = group.refused.get(Reason.EXPIRED, 0) + 1

    def _unqueue(self, group: Group, waiter: Waiter, queue: deque[Waiter], now: float) -> None:
        """Forget a waiter already taken out of ``queue``, and give back its rate tokens."""
        if not queue:
            del group.queues[waiter.tenant]
        group.waiting -= 1
        del self._waiters[waiter.id]
        for bucket in waiter.buckets:
            bucket._refund(1.0, now)
        state = self._tenants[waiter.tenant]
        state.waiting -= 1
        self._forget(waiter.tenant, state)

    # -- the tenant table ------------------------------------------------------

    def _forget(self, tenant: str, state: TenantCalls) -> None:
        """Drop an idle tenant's state at once when it has no rate bucket to
        keep; else keep it among the idle, for :meth:`_sweep`."""
        if state.in_flight or state.waiting:
            return
        if any(tenant in group.tenant_buckets for group in self._groups.values()):
            self._idle[tenant] = None  # kept until _sweep finds its buckets full again
            return
        del self._tenants[tenant]
        for group in self._groups.values():
            group.served.pop(tenant, None)

    def _sweep(self, now: float) -> bool:
        """Drop idle tenants whose buckets have refilled (they read as new ones
        do), oldest idle first; whether any room was made."""
        dropped = False
        for tenant in list(self._idle):
            buckets = [group.tenant_buckets.get(tenant) for group in self._groups.values()]
            if all(b is None or b._level_checked(now) >= b.burst for b in buckets):
                del self._idle[tenant]
                del self._tenants[tenant]
                for group in self._groups.values():
                    group.tenant_buckets.pop(tenant, None)
                    group.served.pop(tenant, None)
                dropped = True
        return dropped

    # -- reads ---------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Calls holding a slot."""
        return len(self._leases)

    @property
    def waiting(self) -> int:
        """Calls waiting for one."""
        return len(self._waiters)

    def signal(self, *, now: float) -> float | None:
        """What the pool reports to the ladder's ``tool_timeout_rate`` trigger at
        ``now`` (see :attr:`ToolLimits.signal`), or ``None`` when it reports nothing."""
        kind = self._limits.signal
        if kind is None:
            return None
        _, timeouts, errors = self._rates.rates(now=self._advance(now))
        return timeouts if kind == "timeouts" else min(1.0, timeouts + errors)

    def risk(self, tools: Iterable[str], *, now: float) -> float:
        """The ``tool_risk`` (0-1) of a request that leads to a call of each of
        ``tools`` (a name once per call, at most 1,024), from
        what those tools have cost in the window at ``now``; see
        :mod:`slopolicy.core.tools.risk`. An empty ``tools`` reads 0.0.

        Raises :class:`UsageError`, changing nothing, for a bad name, a name
        no limits cover, or too many names."""
        calls = calls_per_tool(self._limits, tools)
        now = self._advance(now)
        return combined(
            (
                tool_risk(self._groups[name].rates, self._groups[name].spec, self._limits, now=now),
                times,
            )
            for name, times in calls.items()
        )

    def statistics(self, *, now: float) -> ToolPoolStatistics:
        """A frozen snapshot at ``now`` (monotonic seconds)."""
        now = self._advance(now)
        return pool_statistics(
            self._groups,
            self._rates,
            len(self._leases),
            len(self._waiters),
            len(self._tenants),
            now=now,
        )
