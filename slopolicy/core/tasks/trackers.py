"""Task completion rate and task end-to-end latency, per lane and per tenant.

Counted over a sliding window (default ten minutes, as tasks take minutes):
**completion rate** = completed / (completed + failed + abandoned) of the
tasks that ended in the window; **task e2e** quantiles are over completed
tasks. Tenants are kept LRU-bounded (``max_tenants``); task ids are never keys
here, so cardinality stays bounded whatever the traffic.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from slopolicy.core.slo.sketches import SlidingQuantiles
from slopolicy.core.slo.windows import SlidingCounts
from slopolicy.core.tasks.records import TaskEnded, TaskOutcome
from slopolicy.errors import UsageError

__all__ = ("TaskSnapshot", "TaskTracker", "TaskTrackers")

_FIELDS = {TaskOutcome.COMPLETED: 0, TaskOutcome.FAILED: 1, TaskOutcome.ABANDONED: 2}


@dataclass(frozen=True, slots=True)
class TaskSnapshot:
    """Tasks that ended in the window, for one lane (``tenant`` ``None``) or one
    tenant in a lane; e2e quantiles in seconds, ``None`` without completed tasks;
    ``span_s`` the seconds the window covers (from the tracker's first task on)."""

    lane: str
    tenant: str | None
    window_s: float
    span_s: float
    completed: int
    failed: int
    abandoned: int
    e2e_p50: float | None
    e2e_p95: float | None

    @property
    def ended(self) -> int:
        """Tasks that ended in the window."""
        return self.completed + self.failed + self.abandoned

    @property
    def completion_rate(self) -> float | None:
        """Completed over ended, or ``None`` when none ended."""
        return self.completed / self.ended if self.ended else None

    @property
    def goodput(self) -> float:
        """Task goodput: tasks completed per second over the window."""
        return self.completed / self.span_s if self.span_s > 0 else 0.0


class TaskTracker:
    """Ended tasks of one lane, or of one tenant in a lane, over a sliding window."""

    __slots__ = ("_counts", "_e2e", "_first", "lane", "tenant")

    def __init__(
        self, lane: str, tenant: str | None = None, *, window_s: float = 600.0, slices: int = 12
    ) -> None:
        self.lane = lane
        self.tenant = tenant
        self._counts = SlidingCounts(window_s, slices, len(_FIELDS))
        self._e2e = SlidingQuantiles(window_s, slices)
        self._first: float | None = None  # the first task's end: the window starts no earlier

    def record(self, ended: TaskEnded) -> None:
        """Count one ended task at its ``ended_at``."""
        if self._first is None:
            self._first = ended.ended_at
        self._counts.add(now=ended.ended_at, field=_FIELDS[ended.outcome])
        if ended.outcome is TaskOutcome.COMPLETED:
            self._e2e.record(ended.e2e, now=ended.ended_at)

    def snapshot(self, *, now: float) -> TaskSnapshot:
        """The window at ``now`` (monotonic seconds)."""
        completed, failed, abandoned = self._counts.totals(now=now)
        p50, p95 = self._e2e.quantiles((0.5, 0.95), now=now)
        counts = self._counts
        start = (
            counts.start(now=now)
            if self._first is None
            else max(counts.start(now=now), self._first)
        )
        return TaskSnapshot(
            self.lane,
            self.tenant,
            counts.window_s,
            max(now - start, counts.width),
            int(completed),
            int(failed),
            int(abandoned),
            p50,
            p95,
        )


class TaskTrackers:
    """One :class:`TaskTracker` per lane, and per ``(lane, tenant)`` for the
    ``max_tenants`` most recently seen tenants. :meth:`listen` hands every
    task recorded to a callback too (the gate's telemetry counts them)."""

    __slots__ = ("_lanes", "_listeners", "_slices", "_tenants", "_window_s", "max_tenants")

    def __init__(
        self, *, max_tenants: int = 1024, window_s: float = 600.0, slices: int = 12
    ) -> None:
        if isinstance(max_tenants, bool) or not isinstance(max_tenants, int) or max_tenants < 0:
            raise UsageError(f"max_tenants must be an int >= 0, got {max_tenants!r}")
        self.max_tenants = max_tenants
        self._window_s, self._slices = window_s, slices
        self._lanes: dict[str, TaskTracker] = {}
        self._tenants: OrderedDict[tuple[str, str], TaskTracker] = OrderedDict()
        self._listeners: list[Callable[[TaskEnded], None]] = []

    def record(self, ended: TaskEnded) -> None:
        """Count ``ended`` in its lane's and its tenant's trackers, and hand it
        to every listener."""
        lane = self._lanes.get(ended.lane)
        if lane is None:
            lane = self._lanes[ended.lane] = self._make(ended.lane, None)
        lane.record(ended)
        if self.max_tenants:
            self._tenant(ended.lane, ended.tenant).record(ended)
        for listener in self._listeners:
            listener(ended)

    def _tenant(self, lane: str, tenant: str) -> TaskTracker:
        key = (lane, tenant)
        tracker = self._tenants.get(key)
        if tracker is None:
            if len(self._tenants) >= self.max_tenants:
                self._tenants.popitem(last=False)
            tracker = self._tenants[key] = self._make(lane, tenant)
        else:
            self._tenants.move_to_end(key)
        return tracker

    def listen(self, listener: Callable[[TaskEnded], None]) -> Callable[[], None]:
        """Hand every task recorded from now on to ``listener`` (which must not
        raise); returns the function that stops it, to call once."""
        if not callable(listener):
            raise UsageError(f"listener must be callable, got {listener!r}")
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def lane(self, name: str) -> TaskTracker | None:
        """``name``'s tracker, once a task of it has ended."""
        return self._lanes.get(name)

    def tenant(self, lane: str, tenant: str) -> TaskTracker | None:
        """The tracker of ``tenant`` in ``lane``, if kept."""
        return self._tenants.get((lane, tenant))

    def snapshots(self, *, now: float, tenants: bool = True) -> tuple[TaskSnapshot, ...]:
        """Every lane's snapshot, then (``tenants``) every kept tenant's."""
        found = [tracker.snapshot(now=now) for tracker in self._lanes.values()]
        if tenants:
            found.extend(tracker.snapshot(now=now) for tracker in self._tenants.values())
        return tuple(found)

    def _make(self, lane: str, tenant: str | None) -> TaskTracker:
        return TaskTracker(lane, tenant, window_s=self._window_s, slices=self._slices)
