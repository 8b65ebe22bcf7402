"""Weighted fair sharing across lanes, each lane a :class:`FairQueue`.

Lanes get the same virtual-counter treatment tenants get inside a lane: a
lane's counter grows by ``cost / lane_weight`` for what it is charged, a lane
that becomes backlogged is lifted to ``max(c, V)`` (``V`` the smallest counter
among backlogged lanes, or its last value), and :meth:`LaneScheduler.candidates`
offers lanes smallest counter first. So under contention each lane gets its
weight's share, within ``U/w_a + U/w_b`` per unit weight over any interval
(``U`` the largest cost one pop charges), and no lane with weight > 0 starves.

With a ``lane_slack`` ``S`` and an ``urgency`` for heads (the Policy's: when
a head's lane's latency target falls, arrival plus the lane's TTFT target;
``inf`` for lanes without one), the lanes whose counters are within ``S`` of
the smallest are offered most urgent head first, then the rest by counter: deadline order across
lanes where that helps requests make their targets (a chat turn due in 0.5 s
before a code request due in 2 s that arrived a moment earlier), inside the
lanes' shares. A lane is then offered first only while ``c <= V + S``, so the
bounds above grow by ``S`` on the counters (``2S`` over an interval, as
tenants' inside a lane with a slack).

How a dispatcher uses it: take :meth:`~LaneScheduler.candidates`; pop and
charge the first that fits the engine; repeat until none fits. Inside a lane
only the queue's pick is offered (passing over it for a smaller one would
starve large requests; a lane that orders by key, shortest first, chooses
that order itself, within its slack, and leaves large requests to their
deadlines); across lanes the dispatcher may pass over a head that does not
fit, so capacity another lane's head could use never idles.

Starvation bound (when every charge is at least ``eps > 0`` and at most ``U``):
while lane ``b`` stays backlogged, lane ``a`` is served at most
``floor(U * w_a / (eps * w_b)) + 1`` times between two of ``b``'s turns when the
first candidate is always taken; the same holds for tenants inside a lane with
equal keys, and with keys under a slack ``s`` (per unit weight) it is
``floor((U / w_b + 2 * s) * w_a / eps) + 1``: ``a`` is served only while
``c_a <= V + s <= c_b + s``, and after ``b``'s turn ``c_a >= c_b - U/w_b - s``
(:mod:`slopolicy.core.queueing.fairqueue`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Generic, TypeVar

from slopolicy.core.queueing.counters import charged, check_cost, check_slack, check_weight
from slopolicy.core.queueing.fairqueue import FairQueue, FairQueueStatistics
from slopolicy.errors import UsageError

__all__ = ("LaneScheduler", "QueueView")

T = TypeVar("T")

_NONE: Mapping[str, Collection[str]] = {}  # no tenant skipped


class QueueView(Generic[T]):
    """A read-only view of one lane's :class:`FairQueue` (what
    :meth:`LaneScheduler.queue` gives out): it reads the live queue, and has
    no way to change it (changes go through the scheduler, which keeps its
    lane counters in step)."""

    __slots__ = ("_queue",)

    def __init__(self, queue: FairQueue[T]) -> None:
        self._queue = queue

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def capacity(self) -> int:
        """Items that may wait."""
        return self._queue.capacity

    def peek(self) -> T | None:
        """The next item, or ``None`` when nothing waits."""
        return self._queue.peek()

    def counter(self, tenant: str) -> float | None:
        """``tenant``'s counter, or ``None`` when none is kept."""
        return self._queue.counter(tenant)

    def statistics(self) -> FairQueueStatistics:
        """A snapshot of the queue."""
        return self._queue.statistics()


class _Lane(Generic[T]):
    __slots__ = ("backlogged", "counter", "name", "queue", "rank", "view", "weight")

    def __init__(self, name: str, rank: int, weight: float, queue: FairQueue[T]) -> None:
        self.name = name
        self.rank = rank  # 0 is the most interactive: wins ties
        self.weight = weight
        self.queue = queue
        self.view = QueueView(queue)
        self.counter = 0.0
        self.backlogged = False


def _turn(lane: _Lane[T]) -> tuple[float, int]:
    """A lane's place among the candidates: smallest counter first, then the
    more interactive lane."""
    return lane.counter, lane.rank


class LaneScheduler(Generic[T]):
    """Lanes of :class:`FairQueue`, shared by weight with lane counters.

    Args:
        lanes: ``(name, weight, capacity)`` per lane, most interactive first;
            weights finite and > 0, capacities ints >= 0.
        max_idle_counters: passed to each lane's :class:`FairQueue`.
        slack: each lane's :class:`FairQueue` slack by lane name (cost units
            per unit of tenant weight, finite, >= 0); lanes not named get 0.
        lane_slack: how far past the smallest lane counter (cost units per
            unit of lane weight, finite, >= 0) a lane may be and still be
            offered by ``urgency`` (0: by counter alone).
        urgency: a head's urgency, smaller first (``None``: by counter alone).
    """

    __slots__ = ("_by_name", "_lane_slack", "_lanes", "_last_v", "_urgency")

    def __init__(
        self,
        lanes: Sequence[tuple[str, float, int]],
        *,
        max_idle_counters: int = 10_000,
        slack: Mapping[str, float] | None = None,
        lane_slack: float = 0.0,
        urgency: Callable[[T], float] | None = None,
    ) -> None:
        if not lanes:
            raise UsageError("at least one lane is required")
        check_slack(lane_slack, "lane_slack")
        self._lane_slack = float(lane_slack)
        self._urgency = urgency if lane_slack > 0 else None
        slacks = dict(slack or {})
        built: list[_Lane[T]] = []
        for rank, (name, weight, capacity) in enumerate(lanes):
            check_weight(weight, f"lane {name!r} weight")
            lane_slack = slacks.pop(name, 0.0)
            check_slack(lane_slack, f"lane {name!r} slack")
            queue: FairQueue[T] = FairQueue(
                capacity, max_idle_counters=max_idle_counters, slack=lane_slack
            )
            built.append(_Lane(name, rank, weight, queue))
        self._lanes = tuple(built)
        self._by_name = {lane.name: lane for lane in self._lanes}
        if len(self._by_name) != len(self._lanes):
            raise UsageError("lane names must be unique")
        if slacks:
            raise UsageError(f"slack names unknown lanes: {sorted(slacks)}")
        self._last_v = 0.0

    @property
    def lanes(self) -> tuple[str, ...]:
        """Lane names, most interactive first."""
        return tuple(lane.name for lane in self._lanes)

    def queue(self, lane: str) -> QueueView[T]:
        """A read-only view of ``lane``'s queue (``peek``, ``statistics``,
        ``counter``, ``len``): push, pop, remove and charge through the
        scheduler, so lane counters see the lane become backlogged and are
        charged too."""
        return self._lane(lane).view

    def counter(self, lane: str) -> float:
        """``lane``'s counter (cost units per unit of lane weight)."""
        return self._lane(lane).counter

    def __len__(self) -> int:
        return sum(len(lane.queue) for lane in self._lanes)

    def push(
        self,
        lane: str,
        item: T,
        tenant: str,
        weight: float,
        *,
        key: float = 0.0,
        behind: bool = False,
    ) -> bool:
        """Queue ``item`` for ``tenant`` (tenant ``weight``) in ``lane``, at
        ``key`` (the order inside the tenant, and across tenants within the
        lane's slack; 0: arrival order), ``behind`` when the tenant asks for
        more than its share.

        ``False`` when the lane is full; see :meth:`FairQueue.push`.
        """
        record = self._lane(lane)
        pushed = record.queue.push(item, tenant, weight, key=key, behind=behind)
        self._sync()
        return pushed

    def _push(
        self,
        lane: str,
        item: T,
        tenant: str,
        weight: float,
        *,
        key: float = 0.0,
        behind: bool = False,
    ) -> bool:
        """:meth:`push` for a trusted caller: a known lane, a checked weight,
        key and flag, and an item not waiting anywhere (the policy's own entries)."""
        record = self._by_name[lane]
        pushed = record.queue._push(item, tenant, weight, key=key, behind=behind)
        if pushed and not record.backlogged:  # the lane joins, lifted to V
            # Flags are current (every change goes through this scheduler), so
            # only this lane moves: what _sync would do, for it alone.
            v = self._v()
            if record.counter < v:
                record.counter = v
            record.backlogged = True
        return pushed

    def _displaced(self, lane: str, tenant: str, weight: float) -> T | None:
        """:meth:`FairQueue.displaced` of a known, full lane, for a trusted caller."""
        return self._by_name[lane].queue._displaced(tenant, weight)

    def candidates(self) -> Iterator[tuple[str, T]]:
        """``(lane, head)`` for each backlogged lane, smallest lane counter first
        (ties: the more interactive lane). A snapshot: call again after a pop."""
        self._sync()
        return iter(self._candidates())

    def _candidates(self, skip: Mapping[str, Collection[str]] = _NONE) -> list[tuple[str, T]]:
        """:meth:`candidates` for a caller that changes the queues only through
        this scheduler, so the lanes' backlogged flags are already current;
        a lane's head is of a tenant not in ``skip[lane]``
        (:meth:`FairQueue.peek_skipping`)."""
        order = [lane for lane in self._lanes if lane.backlogged]
        if len(order) > 1:
            order.sort(key=_turn)
        heads = [
            (lane.name, head)
            for lane in order
            if (head := lane.queue.peek_skipping(skip.get(lane.name, ()))) is not None
        ]
        urgency = self._urgency
        if urgency is None or len(heads) < 2:
            return heads
        within = self._by_name[heads[0][0]].counter + self._lane_slack
        near = [pair for pair in heads if self._by_name[pair[0]].counter <= within]
        if len(near) < 2:
            return heads
        near.sort(key=lambda pair: urgency(pair[1]))  # stable: ties keep counter order
        return near + heads[len(near) :]

    def pop(self, lane: str) -> T:
        """Pop ``lane``'s head; charge it with :meth:`charge`. Raises
        :class:`UsageError` when the lane is empty."""
        record = self._lane(lane)
        if not record.queue:
            raise UsageError(f"lane {lane!r} has nothing waiting")
        item = record.queue.pop()
        self._sync()
        return item

    def _pop(self, lane: str) -> T:
        """:meth:`pop` for a trusted caller: a known lane with something waiting."""
        record = self._by_name[lane]
        item = record.queue.pop()
        if not record.queue:  # the lane leaves; V first remembers its counter
            self._v()
            record.backlogged = False
        return item

    def charge(self, lane: str, tenant: str, cost: float, *, weight: float | None = None) -> None:
        """Charge ``cost`` (cost units) to ``lane``'s counter (over the lane
        weight) and to ``tenant``'s counter in that lane (over ``weight``, as
        :meth:`FairQueue.charge`). Refunds stop at the lanes' ``V``, as there."""
        self._lane(lane)
        check_cost(cost)
        if weight is not None:
            check_weight(weight)
        self._charge(lane, tenant, cost, weight)

    def _charge(self, lane: str, tenant: str, cost: float, weight: float | None) -> None:
        """:meth:`charge` for a trusted caller: a known lane, checked cost and weight."""
        record = self._by_name[lane]
        floor = math.inf  # read by a refund only
        if cost < 0:
            self._sync()  # a refund's floor is V, which needs current flags
            floor = self._v()
        counter = charged(record.counter, cost, record.weight, floor)
        record.queue._charge(tenant, cost, weight)
        record.counter = counter

    def remove(self, lane: str, item: T) -> bool:
        """Take ``item`` out of ``lane``; ``False`` if it was not waiting there."""
        removed = self._lane(lane).queue.remove(item)
        self._sync()
        return removed

    def _lane(self, lane: str) -> _Lane[T]:
        record = self._by_name.get(lane)
        if record is None:
            raise UsageError(f"unknown lane {lane!r}; lanes are {list(self._by_name)}")
        return record

    def _v(self) -> float:
        counters = [lane.counter for lane in self._lanes if lane.backlogged]
        if counters:
            self._last_v = min(counters)  # never decreases, as in FairQueue
        return self._last_v

    def _sync(self) -> None:
        """Bring each lane's backlogged flag in line with its queue: lanes that
        emptied leave (their ``V`` is remembered), lanes that filled are lifted.
        ``O(lanes)``; every method calls it, so direct queue use only delays a lift."""
        changed = joining = False
        for lane in self._lanes:
            waiting = bool(lane.queue)
            if waiting != lane.backlogged:
                changed = True
                joining = joining or waiting
        if not changed:  # the common case: nothing to lift, nobody leaving
            return
        self._v()
        for lane in self._lanes:
            if lane.backlogged and not lane.queue:
                lane.backlogged = False
        if joining:
            v = self._v()
            for lane in self._lanes:
                if lane.queue and not lane.backlogged:
                    lane.counter = max(lane.counter, v)
                    lane.backlogged = True
