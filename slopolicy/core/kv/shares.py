"""Each tenant's max-min share of the KV pool, by what it has needed lately.

A share counted in tokens does not see how long a request holds its KV.
On the ServeGen DeepSeek-R1 trace from 600 s, one tenant asks 13% of the
tokens with answers of 8,945 tokens (its lane's typical 1,391), so 49% of the
pool's block-seconds; at twice FCFS's capacity it held 70% of the KV ledger
while the chat turns of the tenants within their share waited on the
ledger and expired. A request's KV is held until it ends, so ordering the
queue cannot give the pool back: what protects the others is not starting
more of such a tenant's work once it holds more than its share of the pool
and another tenant is owed room.

:class:`KVShares` keeps, per tenant, its **need**: the blocks its running
requests hold (their reservations) plus those its queued requests would
reserve, plus those of its requests that **gave up** waiting for the pool
(:meth:`KVShares.gave_up`: they expired held by it, counted from then as if
served, fading with the same time constant), averaged over time with time
constant ``window_s`` (sampled at each refresh, every ``window_s / 20`` of
the caller's clock). Its **share** is max-min fair on those averages over
the pool, by weight: the level ``L`` where ``sum_i min(need_i, w_i L)`` is
the pool (``inf`` while the needs fit). A tenant is **owed** ``max(0,
min(want_i, w_i L) - held_i)``: the part of its share it does not hold.
``want_i`` is ``max(need_i, given_i)``, where ``given_i`` is what its
requests gave up, faded to now (so a turn that just gave up is owed its
room at once, not as the average takes it in, about a twentieth of it a
refresh); for a tenant the caller names **protected** (within its max-min
share of a saturated engine, by :class:`~slopolicy.core.queueing.demand.TenantDemand`)
it is ``max(need_i, peak_i, given_i)``, where ``peak_i`` is the most it
needed lately (its largest sample, fading with the same time constant). A
start of tenant ``t`` of ``b`` blocks is allowed when the tenant then holds
at most ``w_t L``, or, past it, when the room free after it still covers
what every other tenant is owed. So the cap binds only where the pool is
over-asked (a finite level) and another tenant's recent need is unmet: with
nobody owed, any tenant may fill the pool (work-conserving), and a tenant
within its share is never held by it. The caller holds nothing while
nothing runs: the room owed comes from running requests' ends, and with
none to come, tenants whose next request alone is more than their share
would hold each other back for good.

Why the requests that gave up count: a chat turn waits a fraction of a
second for room and is gone, while an answer holds its room for a minute.
Counted only while queued, a tenant whose turns all expire on a full pool
reads as needing almost nothing, is owed nothing, and the tenant that fills
every freed block keeps the pool. Counted as served, its turns make it owed
the room they would have held, so the next free blocks are kept for it. On
the ServeGen window from noon at twice FCFS's capacity, the tenants within
their share attained 0.705 before and 0.903 with it (with the shares bound
on the pool's saturation rather than the engine's; ``benchmarks/README.md``).

Why a protected tenant is owed its peak: a tenant's need comes in bursts
(a few chat turns at once, then nothing), and its average is what it needs
between them. Owed only the average, a burst finds the room the average
left free already taken by the tenant past its share, whose long answers
give it back only minutes later. Owed its peak, the room for its next burst
stays free while the burst is recent. Only under saturation, and only for
the tenants within their share of the engine: a tenant over it has bursts
that are the excess max-min fairness sheds, and while the engine keeps up
nobody is over, and room kept free for bursts that may not come would hold
back work the engine has room for. On the ServeGen window from 36,000 s
at twice FCFS's capacity the tenants within their share attained 0.841
before and 0.935 with it (``benchmarks/README.md``).

The caller (the policy's dispatcher) asks at every start, refreshes from
its book of live requests, says what each allowed start took
(:meth:`KVShares.started`) so the tenant's holdings are current until the
next refresh, and says which queued requests gave up (a request that ends
is seen at the next refresh, within ``window_s / 20``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from slopolicy.core.checks import check_count, check_now
from slopolicy.core.kv.future import check_name
from slopolicy.core.queueing.counters import check_weight, check_window
from slopolicy.errors import UsageError

__all__ = ("KVShares", "TenantKV")

#: A tenant whose averaged need has fallen below this (blocks) and that holds
#: and queues nothing is forgotten.
_NEGLIGIBLE = 1e-3


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantKV:
    """What one tenant's live requests take of the pool at a refresh
    (keywords only: ``held`` and ``queued`` are both block counts).

    Attributes:
        weight: its weight (> 0).
        held: blocks its running requests hold reserved.
        queued: blocks its queued requests would reserve.
    """

    weight: float
    held: int
    queued: int


class _Tenant:
    __slots__ = ("cap", "gave_up", "gave_up_at", "held", "need", "peak", "weight")

    def __init__(self) -> None:
        self.need = 0.0  # averaged blocks held, queued and given up
        self.peak = 0.0  # the largest sample of them lately, fading
        self.weight = 1.0
        self.held = 0  # blocks held, as of the refresh plus starts since
        self.cap = 0.0  # min(what it is owed room for, weight * level) at the refresh
        self.gave_up = 0.0  # blocks given up, as of gave_up_at, fading
        self.gave_up_at = -math.inf

    def given_up(self, now: float, window: float) -> float:
        """The blocks its requests gave up, faded to ``now`` (a time before
        the latest one counts as it)."""
        if not self.gave_up:
            return 0.0
        return self.gave_up * math.exp(-max(0.0, now - self.gave_up_at) / window)


class KVShares:
    """Tenants' max-min shares of a KV pool by their averaged need (see the module).

    Args:
        num_blocks: the pool (blocks, >= 1).
        window_s: the time constant of each tenant's averaged need (seconds,
            > 0); refreshes are ``window_s / 20`` apart.
    """

    __slots__ = ("_at", "_due", "_level", "_owed", "_pool", "_refresh", "_tenants", "_window")

    def __init__(self, num_blocks: int, window_s: float) -> None:
        check_count("num_blocks", num_blocks, minimum=1)
        check_window(window_s)
        self._pool = num_blocks
        self._window = float(window_s)
        self._refresh = window_s / 20
        self._tenants: dict[str, _Tenant] = {}
        self._at: float | None = None  # the latest refresh
        self._due = -math.inf
        self._level = math.inf  # blocks per unit of weight
        self._owed = 0.0  # blocks, summed over every tenant

    @property
    def level(self) -> float:
        """``L``: the share of the pool per unit of weight (blocks; ``inf``
        while the averaged needs fit the pool), as of the latest refresh."""
        return self._level

    def due(self, *, now: float) -> bool:
        """Whether a refresh is due at ``now`` (the first read of each
        ``window_s / 20`` of the caller's clock)."""
        check_now(now)
        return now >= self._due

    def need(self, tenant: str) -> float:
        """``tenant``'s averaged need as of the latest refresh (blocks; 0 if unknown)."""
        kept = self._tenants.get(tenant)
        return 0.0 if kept is None else kept.need

    def owed(self, tenant: str | None = None) -> float:
        """The blocks the tenants are owed (their share less what they hold),
        all of them, or all but ``tenant``."""
        kept = None if tenant is None else self._tenants.get(tenant)
        return self._owed - (0.0 if kept is None else max(0.0, kept.cap - kept.held))

    def refresh(
        self,
        tenants: Mapping[str, TenantKV],
        *,
        now: float,
        protected: Collection[str] = frozenset(),
        pool: int | None = None,
    ) -> None:
        """Sample what every tenant's live requests take at ``now`` (a tenant
        absent takes nothing), then recompute the level and what each is
        owed; ``protected``: the tenants within their max-min share of a
        saturated engine, owed room for the most they needed lately, not
        only their average (see the module); ``pool``: the blocks shared
        out from now on, where the pool counted changed (the engine reported
        its own: :meth:`KVReservation.observe_capacity
        <slopolicy.core.kv.ledger.KVReservation.observe_capacity>`)."""
        check_now(now)
        if pool is not None:
            check_count("pool", pool, minimum=1)
        for name, took in tenants.items():
            if not isinstance(took, TenantKV):
                raise UsageError(f"tenant {name!r}: expected a TenantKV, got {took!r}")
            check_weight(took.weight, f"tenant {name!r} weight")
            check_count(f"tenant {name!r}'s held blocks", took.held)
            check_count(f"tenant {name!r}'s queued blocks", took.queued)
        if (
            not isinstance(protected, Collection)
            or isinstance(protected, str)
            or not all(isinstance(name, str) for name in protected)
        ):
            raise UsageError(f"protected must be a collection of tenant names, got {protected!r}")
        self._refresh_at(tenants, now, frozenset(protected), self._pool if pool is None else pool)

    def _refresh_at(
        self, tenants: Mapping[str, TenantKV], now: float, protected: frozenset[str], pool: int
    ) -> None:
        """:meth:`refresh` for a caller that checked its arguments."""
        self._pool = pool
        self._due = (math.floor(now / self._refresh) + 1.0) * self._refresh
        at = self._at
        # Each sample stands for the time since the one before (the first: the window).
        kept_part = 0.0 if at is None else math.exp(-max(0.0, now - at) / self._window)
        self._at = now if at is None else max(at, now)
        records = self._tenants
        for name in tenants.keys() - records.keys():
            records[name] = _Tenant()
        gone = []
        window = self._window
        for name, record in records.items():
            took = tenants.get(name)
            given_up = record.given_up(now, window)
            sample = given_up + (0 if took is None else took.held + took.queued)
            record.need = need = record.need * kept_part + sample * (1.0 - kept_part)
            record.peak = peak = max(sample, record.peak * kept_part)
            # Room given up just now is owed at once, not once the average has
            # grown; a protected tenant is owed room for its bursts too (the
            # most it needed lately): capped by its share below.
            record.cap = max(need, peak, given_up) if name in protected else max(need, given_up)
            record.held = 0 if took is None else took.held
            if took is not None:
                record.weight = took.weight
            elif record.need < _NEGLIGIBLE and given_up < _NEGLIGIBLE:
                gone.append(name)
        for name in gone:
            del records[name]
        self._level = level = _level(records.values(), self._pool)
        owed = 0.0
        for record in records.values():
            record.cap = min(record.cap, record.weight * level)
            owed += max(0.0, record.cap - record.held)
        self._owed = owed

    def allows(self, tenant: str, blocks: int, *, weight: float, free: int) -> bool:
        """Whether ``tenant`` (at ``weight``) may start a request reserving
        ``blocks`` with ``free`` blocks of the pool unreserved: within its
        share after it, or leaving the others' owed room free (see the module)."""
        check_count("blocks", blocks)
        check_count("free", free)
        check_weight(weight)
        return self._allows(tenant, blocks, weight, free)

    def _allows(self, tenant: str, blocks: int, weight: float, free: int) -> bool:
        """:meth:`allows` for a caller that checked its arguments."""
        return self._within(tenant, blocks, weight) or free - blocks >= self.owed(tenant)

    def _within(self, tenant: str, blocks: int, weight: float) -> bool:
        """Whether ``tenant`` holds at most its share with ``blocks`` more:
        allowed whatever the others are owed."""
        kept = self._tenants.get(tenant)
        return (0 if kept is None else kept.held) + blocks <= weight * self._level

    def started(self, tenant: str, blocks: int) -> None:
        """``tenant`` started a request reserving ``blocks`` (int >= 0) since
        the latest refresh: it holds them now."""
        check_count("blocks", blocks)
        self._started(tenant, blocks)

    def gave_up(self, tenant: str, blocks: int, *, weight: float, now: float) -> None:
        """A queued request of ``tenant`` (at ``weight``) that would have
        reserved ``blocks`` gave up waiting for the pool at ``now`` (it
        expired held by the pool or by its share): from the next refresh its
        tenant's need counts them as held from ``now``, fading with time
        constant ``window_s`` (see the module)."""
        check_name("tenant", tenant)
        check_count("blocks", blocks)
        check_weight(weight)
        check_now(now)
        self._gave_up(tenant, blocks, weight, now)

    def _gave_up(self, tenant: str, blocks: int, weight: float, now: float) -> None:
        """:meth:`gave_up` for a caller that checked its arguments."""
        kept = self._tenants.get(tenant)
        if kept is None:  # nothing live at the latest refresh: known from now
            self._tenants[tenant] = kept = _Tenant()
            kept.weight = weight
        kept.gave_up = kept.given_up(now, self._window) + blocks
        kept.gave_up_at = max(kept.gave_up_at, now)

    def _started(self, tenant: str, blocks: int) -> None:
        """:meth:`started` for a caller that checked ``blocks``."""
        kept = self._tenants.get(tenant)
        if kept is None:  # unseen at the latest refresh: owed nothing yet
            self._tenants[tenant] = kept = _Tenant()
        before = max(0.0, kept.cap - kept.held)
        kept.held += blocks
        self._owed += max(0.0, kept.cap - kept.held) - before


def _level(records: Iterable[_Tenant], pool: int) -> float:
    """The max-min level per unit of weight of ``records``' needs over
    ``pool`` blocks: ``inf`` while they fit (progressive filling, in order of
    need per weight: ``O(n log n)``)."""
    rest = sorted(records, key=lambda record: record.need / record.weight)
    if sum(record.need for record in rest) <= pool:
        return math.inf
    left, weights = float(pool), sum(record.weight for record in rest)
    for record in rest:
        level = left / weights
        if record.need >= record.weight * level:
            return level
        left -= record.need
        weights -= record.weight
    return math.inf  # unreachable: the needs exceed the pool
