"""Fair queuing across the tenants of one lane: Virtual Token Counters.

VTC (Sheng et al., "Fairness in Serving LLMs", OSDI 2024). Each tenant ``u``
has a counter ``c_u`` (cost units per unit of weight) and a backlog of waiting
items, each pushed with a ``key`` (a finite number, 0 unless given):

- **lift**: a tenant that becomes backlogged (nothing of its was waiting) is
  lifted to ``max(c_u, V)``, ``V`` being the smallest counter among backlogged
  tenants (its last value while none is), so idle time cannot be banked as
  credit;
- **pick**: a backlogged tenant is *eligible* while ``c_u <= V + s`` (``s`` the
  queue's ``slack``, cost units per unit weight, >= 0). Of the eligible
  tenants, those whose last push was not *behind* come first (the caller
  pushes a tenant behind when it asks for more than its max-min share:
  :mod:`slopolicy.core.queueing.demand`), then the one whose first item has
  the smallest key is served (ties: the smaller counter, then the tenant
  backlogged first); a tenant's items go by ``(key, push order)``, so with
  equal keys in arrival order (FIFO);
- **charge**: the caller charges what it serves, ``c_u += cost / w_u``.

With ``s = 0``, equal keys and nothing pushed behind the pick is VTC's: the
head of the backlogged tenant with the smallest counter (ties: backlogged
first), and heads are never skipped, so a large request cannot be starved by
small ones behind it. Keys order the work inside the fairness the counters
keep: with prompt tokens as keys, shortest first inside each tenant, and across
the tenants within ``s`` of the least served. An item may then wait behind
later ones with smaller keys, of its own tenant or of another within the
slack; its deadline bounds that wait (DESIGN.md invariant 6), and the slack
bounds how far its tenant falls behind. The flag orders the same choice: under
saturation a tenant within its share is not passed, inside the slack, by the
short items of a tenant with a deep backlog (which would otherwise win every
pick until its counter rose by ``s``); the counters still bound what the
over-share tenant loses, so it is never starved.

``V`` never decreases (a lift puts a tenant at or above it, leaving the
backlog and charging only raise the minimum, and refunds stop at ``V``), so a
non-backlogged tenant with ``c_u <= V`` returns exactly as a new one would.
Charges to a tenant with nothing waiting (output tokens of a running request)
go to its own counter, as in the paper. Idle counters are kept up to
``max_idle_counters``, the smallest forgotten first (those at or under ``V``
lose nothing); a forgotten tenant counts as ``V``, so a charge to it starts
from ``V``, which only ever charges it more.

**Bound** (charge at dispatch: every pop is followed at once by a charge of the
popped item's cost, in ``[0, U_i]`` for tenant ``i``; no other charges). For
any two backlogged tenants ``i`` and ``j``, at all times
``c_i - c_j <= U_i/w_i + s``. By induction over operations:

- *serving* ``m``: it was eligible, so ``c_m <= V + s <= c_j + s`` for every
  backlogged ``j``, and the charge adds at most ``U_m/w_m``; ``c_j - c_m``
  only falls;
- *joining*: ``k`` is lifted to ``max(c_k, V)``. Then
  ``c_j - c_k <= c_j - V <= U_j/w_j + s`` by induction (``V`` is a backlogged
  tenant's counter). If ``c_k = V``, ``c_k - c_j <= 0``; otherwise ``c_k`` is
  the counter ``k`` left with (a forgotten tenant returns at ``V``): it left
  after a serve, with ``c_k <= V' + s + U_k/w_k`` (``V'`` then), or cancelled,
  with ``c_k - V' <= U_k/w_k + s`` by induction; ``V`` never decreases, so
  ``c_k - c_j <= c_k - V <= U_k/w_k + s``;
- *leaving* only removes pairs; a refund (not counted as service) keeps the
  claim too, as it leaves every backlogged counter at or above ``V``.

While ``i`` and ``j`` both stay backlogged, ``S_i/w_i`` (``S`` the cost
served over an interval) is the growth of ``c_i``, and ``c_i - c_j`` stays in
``[-(U_j/w_j + s), U_i/w_i + s]``, so over any interval
``|S_i/w_i - S_j/w_j| <= U_i/w_i + U_j/w_j + 2s``, and from equal counters
(two new tenants) ``-(U_j/w_j + s) <= S_i/w_i - S_j/w_j <= U_i/w_i + s``. At
``s = 0`` this is the paper's ``2U`` at equal weights. The slack counts twice
over an interval because keys can move a tenant from one end of its slack to
the other (small items first in one tenant, then in the other), and the bound
is then reached. With equal keys and nothing behind the pick is VTC's
whatever ``s`` is (the smallest counter is eligible and wins the tie on key),
so the bounds hold with ``s = 0``, the interval's approached to within one
cost quantum but not reached. The proof reads only eligibility, so the flags,
like the keys, change the order inside the bound, never the bound.

:meth:`FairQueue.peek_skipping` picks as if the tenants it skips had nothing
waiting (``V`` and eligibility are the others'); a caller that pops what it
shows (by :meth:`FairQueue.remove`) serves a tenant that was eligible among
those, so the bound holds between the tenants never skipped; nothing of a
skipped tenant's queue is served meanwhile, so the counters give it its turn
back once the caller stops skipping it.

Costs, with ``n`` the tenants kept and ``k`` one tenant's items waiting:
push, pop, remove and charge are ``O(log n + log k)`` amortized (heaps with
lazy invalidation, rebuilt once mostly stale; a tenant's heap of keys only
once a key smaller than an earlier one arrives, and the pick's heaps of
:mod:`slopolicy.core.queueing.keyed` only once a key other than 0 or a push
behind does: until then the pick is the top of the counter heap, as in VTC);
peek is amortized ``O(1)`` plus that heap clean-up; ``len`` is ``O(1)`` and
exact.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Generic, TypeVar

from slopolicy.core.checks import check_count
from slopolicy.core.queueing.backlog import Places, Where, _Tenant
from slopolicy.core.queueing.counters import (
    charged,
    check_cost,
    check_finite,
    check_slack,
    check_weight,
)
from slopolicy.core.queueing.keyed import KeyedPick
from slopolicy.errors import UsageError

__all__ = ("FairQueue", "FairQueueStatistics")

T = TypeVar("T")

# Heaps are rebuilt once stale entries outnumber live ones by this much, so
# lazy deletion costs amortized O(1) per entry and bounded memory.
_SLACK = 64


@dataclass(frozen=True, slots=True)
class FairQueueStatistics:
    """A snapshot of a :class:`FairQueue`; counters in cost units per unit weight.

    Attributes:
        waiting: items waiting.
        backlogged_tenants: tenants with at least one item waiting.
        virtual_time: ``V``, the smallest counter among backlogged tenants (its
            last value when none is).
        min_counter: smallest counter among backlogged tenants (``None``: none).
        max_counter: largest counter among backlogged tenants (``None``: none).
        idle_counters: counters kept for tenants with nothing waiting.
    """

    waiting: int
    backlogged_tenants: int
    virtual_time: float
    min_counter: float | None
    max_counter: float | None
    idle_counters: int


class FairQueue(Generic[T]):
    """A bounded queue that serves tenants by Virtual Token Counters.

    Items are told apart by identity (``is``), so equal but distinct records
    may wait side by side; an item waits at most once at a time.

    Args:
        capacity: items that may wait; :meth:`push` refuses more.
        max_idle_counters: counters kept for tenants with nothing waiting;
            beyond it the smallest are forgotten (never the tenant whose last
            item just went, unless the cap is 0); such a tenant counts as ``V``.
        slack: how far above ``V`` a tenant's counter may be (cost units per
            unit weight, finite, >= 0) for its items to be ordered by key
            against the least served tenant's (see the module docstring); 0
            orders by key only among the tenants at ``V``.
    """

    __slots__ = (
        "_backlogged",
        "_capacity",
        "_idle",
        "_idle_count",
        "_keyed",
        "_last_v",
        "_max_idle",
        "_places",
        "_ready",
        "_seq",
        "_slack",
        "_tenants",
        "_where",
    )

    def __init__(
        self, capacity: int, *, max_idle_counters: int = 10_000, slack: float = 0.0
    ) -> None:
        check_count("capacity", capacity)
        check_count("max_idle_counters", max_idle_counters)
        check_slack(slack)
        self._capacity = capacity
        self._max_idle = max_idle_counters
        self._slack = float(slack)
        self._tenants: dict[str, _Tenant[T]] = {}
        self._where: Where[T] = {}
        self._ready: list[tuple[float, int, int, _Tenant[T]]] = []  # counter, joined, stamp
        self._idle: list[tuple[float, int, _Tenant[T]]] = []  # counter, stamp
        self._places: Places[T] | None = None  # made when first full
        self._backlogged = 0
        self._idle_count = 0
        self._keyed: KeyedPick[T] | None = None  # None while every key pushed was 0
        self._last_v = 0.0
        self._seq = itertools.count()  # push numbers, join order and stamps

    @property
    def capacity(self) -> int:
        """Items that may wait."""
        return self._capacity

    @property
    def slack(self) -> float:
        """How far above ``V`` a counter may be for the tenant to be picked by
        key (cost units per unit weight)."""
        return self._slack

    def __len__(self) -> int:
        return len(self._where)

    def push(
        self, item: T, tenant: str, weight: float, *, key: float = 0.0, behind: bool = False
    ) -> bool:
        """Queue ``item`` for ``tenant``, served inside the tenant by
        ``(key, push order)``: with equal keys, FIFO.

        ``weight`` (finite, > 0) becomes the tenant's weight for later
        charges; ``key`` is a finite number (with prompt tokens: shortest
        first); ``behind`` (the tenant asks for more than its share) puts the
        tenant after those not behind among the eligible, until a later push
        says otherwise. Returns ``False``, changing nothing, when ``capacity``
        items already wait. Raises :class:`UsageError` for a bad weight or key
        or an item already waiting.
        """
        check_weight(weight)
        check_finite(key, "key")
        if not isinstance(behind, bool):
            raise UsageError(f"behind must be a bool, got {behind!r}")
        if id(item) in self._where:
            raise UsageError(f"{item!r} is already waiting")
        return self._push(item, tenant, weight, key=key, behind=behind)

    def _push(
        self, item: T, tenant: str, weight: float, *, key: float = 0.0, behind: bool = False
    ) -> bool:
        """:meth:`push` for a caller that has checked the weight, the key and the item."""
        if len(self._where) >= self._capacity:
            return False
        record = self._tenants.get(tenant)
        joining = record is None or not record.live
        if joining:
            v = self._v()
            if record is None:
                record = _Tenant(tenant, v, weight)
                self._tenants[tenant] = record
            else:
                self._idle_count -= 1
                record.counter = max(record.counter, v)
            record.joined = next(self._seq)
            self._backlogged += 1
        assert record is not None
        record.weight = weight
        seq = next(self._seq)
        self._where[id(item)] = (record, seq)
        record.add((key, seq, item), self._where)
        if joining:
            # Indexed once live: a heap rebuild here keeps only live tenants.
            self._index_ready(record)
        if self._keyed is not None:
            moved = behind is not record.behind
            record.behind = behind
            if joining or key < record.key:  # its first key falls (a rise waits for the pick)
                record.key, moved = key, True
            if moved:
                self._keyed.index(record, self._backlogged)
        elif key != 0 or behind:
            record.behind = behind
            self._key_all(record, key)
        if self._places is not None:
            self._places.grew(record, self._backlogged)
        return True

    def _key_all(self, record: _Tenant[T], key: float) -> None:
        """The first key other than 0 or push behind (for ``record``): the
        pick keeps its heaps from now on, listing every backlogged tenant
        (``O(n)`` once)."""
        backlogged = [e[3] for e in self._ready if e[3].stamp == e[2] and e[3].live]
        for other in backlogged:
            other.key = 0.0  # every key before this one was 0
        record.key = min(key, 0.0)
        self._keyed = KeyedPick(backlogged, self._slack, self._seq)

    def displaced(self, tenant: str, weight: float) -> T | None:
        """What a full queue pushes out to make room for an item of ``tenant``
        (at ``weight``): the newest item of the tenant with the most waiting
        per unit weight, if the arrival's place comes first (see
        :mod:`slopolicy.core.queueing.backlog`); ``None`` when the arrival is refused or
        the queue has room. A read: the caller removes the item, then pushes."""
        check_weight(weight)
        return self._displaced(tenant, weight) if len(self._where) >= self._capacity else None

    def _displaced(self, tenant: str, weight: float) -> T | None:
        """:meth:`displaced` for a caller that checked the weight and found the queue full."""
        places = self._places
        if places is None:  # full for the first time since it was empty
            backlogged = (e[3] for e in self._ready if e[3].stamp == e[2] and e[3].live)
            places = self._places = Places(backlogged, self._seq)
        latest = places.latest()
        if latest is None or latest.name == tenant:
            return None
        own = self._tenants.get(tenant)
        if ((own.live if own is not None else 0) + 1) / weight >= latest.live / latest.weight:
            return None
        return latest.newest(self._where)

    def peek(self) -> T | None:
        """The next item, or ``None`` when nothing waits."""
        record = self._pick()
        return None if record is None else record.first(self._where)[2]

    def peek_skipping(self, skip: Collection[str]) -> T | None:
        """The next item of a tenant not in ``skip``, picked as :meth:`peek`
        picks among the others (the tenants the caller holds back are left
        out, as if nothing of theirs waited); ``None`` when no other waits.
        Changes no counter, flag or order: ``O(k log n)`` for ``k`` skipped."""
        if isinstance(skip, str) or not isinstance(skip, Collection):
            raise UsageError(f"skip must be a collection of tenant names, got {skip!r}")
        if not skip:
            return self.peek()
        detached: list[_Tenant[T]] = []
        try:
            while True:
                record = self._pick()
                if record is None:
                    return None
                if record.name not in skip:
                    return record.first(self._where)[2]
                # Its heap entries go stale (dropped as they surface); listed again below.
                record.stamp = next(self._seq)
                record.pick_stamp = next(self._seq)
                detached.append(record)
        finally:
            keyed = self._keyed
            for record in detached:
                self._index_ready(record)
                if keyed is not None:
                    keyed.index(record, self._backlogged)

    def pop(self) -> T:
        """Remove and return :meth:`peek`'s item. Charges nothing: the caller
        charges what it serves. Raises :class:`UsageError` when empty."""
        record = self._pick()
        if record is None:
            raise UsageError("pop from an empty FairQueue")
        where = self._where
        item = record.first(where)[2]
        del where[id(item)]
        record.live -= 1
        if record.live:
            record.served(where)
        else:
            self._leave(record)
        return item

    def remove(self, item: T) -> bool:
        """Take ``item`` out wherever it waits (cancellation, deadline expiry).

        Returns ``False`` if it was not waiting. Amortized ``O(1)`` (``O(log n)``
        when it was the tenant's last item): the entry leaves the tenant's
        backlog later, but ``len`` and :meth:`peek` are exact at once.
        """
        entry = self._where.pop(id(item), None)
        if entry is None:
            return False
        record = entry[0]
        record.live -= 1
        if record.live:
            record.prune(self._where)
        else:
            self._leave(record)
        return True

    def charge(self, tenant: str, cost: float, *, weight: float | None = None) -> None:
        """Add ``cost / weight`` to ``tenant``'s counter (cost units).

        ``weight`` defaults to the last weight pushed for the tenant (1.0 if the
        queue remembers none, so callers with weighted tenants should pass it
        for charges that may follow the tenant going idle). A negative cost is
        a refund (reconciling a predicted output); it never takes a counter
        below ``V`` (nor raises one already under it), because a counter under
        ``V`` would be banked credit: a burst of service ahead of tenants that
        kept waiting, and a ``V`` that moves back, which would make forgotten
        counters wrong. So a refund to the backlogged tenant at ``V`` is lost.
        """
        check_cost(cost)
        if weight is not None:
            check_weight(weight)
        self._charge(tenant, cost, weight)

    def _charge(self, tenant: str, cost: float, weight: float | None) -> None:
        """:meth:`charge` for a caller that has checked the cost and the weight."""
        if cost == 0:
            return
        record = self._tenants.get(tenant)
        if record is None:
            v = self._v()
            w = 1.0 if weight is None else weight
            counter = charged(v, cost, w, v)
            if counter > v and self._max_idle:  # at V it is a new tenant: keep nothing
                new: _Tenant[T] = _Tenant(tenant, counter, w)
                self._tenants[tenant] = new
                self._idle_count += 1
                self._index_idle(new)
            return
        w = record.weight if weight is None else weight
        floor = self._v() if cost < 0 else math.inf  # V is a refund's floor only
        record.counter = charged(record.counter, cost, w, floor)
        if record.live:
            self._index_ready(record)
            if self._keyed is not None:
                self._keyed.index(record, self._backlogged)
        else:
            self._index_idle(record)

    def counter(self, tenant: str) -> float | None:
        """``tenant``'s counter, or ``None`` when none is kept (it counts as ``V``)."""
        record = self._tenants.get(tenant)
        return None if record is None else record.counter

    def statistics(self) -> FairQueueStatistics:
        """A snapshot; ``O(tenants kept)`` for the largest counter."""
        v = self._v()
        counters = [r.counter for r in self._tenants.values() if r.live]
        return FairQueueStatistics(
            waiting=len(self._where),
            backlogged_tenants=self._backlogged,
            virtual_time=v,
            min_counter=min(counters, default=None),
            max_counter=max(counters, default=None),
            idle_counters=self._idle_count,
        )

    def _v(self) -> float:
        record = self._top()
        if record is not None:
            self._last_v = record.counter  # never decreases (see the module docstring)
        return self._last_v

    def _top(self) -> _Tenant[T] | None:
        """The backlogged tenant with the smallest counter; drops stale entries."""
        ready = self._ready
        while ready:
            record = ready[0][3]
            if record.stamp == ready[0][2] and record.live:
                return record
            heapq.heappop(ready)
        return None

    def _pick(self) -> _Tenant[T] | None:
        """The tenant served next, its first entry current; ``None`` when
        nothing waits."""
        low = self._top()
        if low is None or self._keyed is None:  # equal keys: the smallest counter is picked
            return low
        return self._keyed.pick(low, self._where)

    def _leave(self, record: _Tenant[T]) -> None:
        """``record`` has nothing left waiting: keep its counter as idle."""
        record.clear()
        self._backlogged -= 1
        if not self._backlogged:
            # It was the only backlogged tenant, so its counter was V.
            self._last_v = max(self._last_v, record.counter)
            self._places = None  # empty: rebuilt if it fills again
        self._idle_count += 1
        self._index_idle(record, keep=True)

    def _index_ready(self, record: _Tenant[T]) -> None:
        record.stamp = next(self._seq)
        heapq.heappush(self._ready, (record.counter, record.joined, record.stamp, record))
        if len(self._ready) > 2 * self._backlogged + _SLACK:
            self._ready = [e for e in self._ready if e[3].stamp == e[2] and e[3].live]
            heapq.heapify(self._ready)

    def _index_idle(self, record: _Tenant[T], *, keep: bool = False) -> None:
        record.stamp = next(self._seq)
        heapq.heappush(self._idle, (record.counter, record.stamp, record))
        if len(self._idle) > 2 * self._idle_count + _SLACK:
            self._idle = [e for e in self._idle if e[2].stamp == e[1] and not e[2].live]
            heapq.heapify(self._idle)
        if self._idle_count > self._max_idle:
            self._forget(record if keep and self._max_idle else None)

    def _forget(self, keep: _Tenant[T] | None) -> None:
        """Forget idle counters down to the cap, smallest first: those at or
        under V lose nothing, the rest the least debt. ``keep`` (a tenant that
        just left) is spared, so the charge for what was just served still
        finds its counter and weight."""
        spared = None
        while self._idle_count > self._max_idle and self._idle:
            entry = heapq.heappop(self._idle)
            victim = entry[2]
            if victim.stamp != entry[1] or victim.live:
                continue
            if victim is keep:
                spared = entry
                continue
            victim.stamp = -1
            del self._tenants[victim.name]
            self._idle_count -= 1
        if spared is not None:
            heapq.heappush(self._idle, spared)
