"""SLO trackers for every lane and for each tenant within a lane, with bounded memory.

Lane trackers are made up front, one per configured lane, with burn-rate
windows and the TTFT budget split. Tenant trackers are keyed by
``(lane, tenant)``, judged against that lane's targets, made on a tenant's
first request and kept in least-recently-used order: past ``max_tenants`` the
tenant unheard from longest is dropped with its history (harmless: a tenant
quiet for that long has nothing in its window worth diagnosing). They keep
the short window only (no burn windows, no stage split) so each costs little.

Records the policy makes itself are judged and counted in batches of up to
:data:`FOLD_AFTER`, in one tight loop, before anything is read (and before
any other record), so every read sees every record in order: the trackers'
code and data then stay hot in cache, which halves their cost. (A custom cost
model is asked at once, so that a bad one raises in the call that finished
the request.)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence

from slopolicy.core.checks import check_now
from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.slo.burn import DEFAULT_BURN_RULES, BurnRule
from slopolicy.core.slo.judged import Judged
from slopolicy.core.slo.snapshot import SLOSnapshot
from slopolicy.core.slo.targets import SLOTargets
from slopolicy.core.slo.tracker import CostModel, SLOTracker
from slopolicy.errors import UsageError

__all__ = ("FOLD_AFTER", "TrackerSet")

#: Records of the policy's own that wait, judged, before they are counted.
FOLD_AFTER = 256


class TrackerSet:
    """One :class:`SLOTracker` per lane and per ``(lane, tenant)`` (LRU-bounded).

    ``lanes`` maps each lane name to its targets; the remaining settings are
    passed to every tracker (burn settings to lane trackers only).
    """

    __slots__ = (
        "_alpha",
        "_cost_model",
        "_evicted",
        "_lanes",
        "_pending",
        "_rejected_are_errors",
        "_slices",
        "_tenants",
        "_window_s",
        "max_tenants",
    )

    def __init__(
        self,
        lanes: Mapping[str, SLOTargets],
        *,
        max_tenants: int = 1024,
        cost_model: CostModel | None = None,
        window_s: float = 60.0,
        slices: int = 12,
        alpha: float = 0.01,
        burn_rules: Sequence[BurnRule] = DEFAULT_BURN_RULES,
        burn_buckets: int = 60,
        rejected_are_errors: bool = False,
        start: float | None = None,
    ) -> None:
        if not lanes:
            raise UsageError("a tracker set needs at least one lane")
        if max_tenants < 0:
            raise UsageError(f"max_tenants must be >= 0, got {max_tenants!r}")
        self.max_tenants = max_tenants
        self._evicted = 0
        # The policy's own records, waiting to be counted (judged already
        # when a custom cost model judged them at once).
        self._pending: list[tuple[SLOTracker, Finished | Judged, float]] = []
        self._cost_model = cost_model
        self._window_s, self._slices, self._alpha = window_s, slices, alpha
        self._rejected_are_errors = rejected_are_errors
        self._lanes = {
            name: SLOTracker(
                name,
                targets,
                cost_model=cost_model,
                window_s=window_s,
                slices=slices,
                alpha=alpha,
                burn_rules=burn_rules,
                burn_buckets=burn_buckets,
                rejected_are_errors=rejected_are_errors,
                start=start,
            )
            for name, targets in lanes.items()
        }
        self._tenants: OrderedDict[tuple[str, str], SLOTracker] = OrderedDict()

    @property
    def lanes(self) -> tuple[str, ...]:
        """The lane names, in the order given."""
        return tuple(self._lanes)

    @property
    def tenant_count(self) -> int:
        """Tenant trackers held now (at most ``max_tenants``)."""
        self._fold()
        return len(self._tenants)

    @property
    def evicted(self) -> int:
        """Tenant trackers dropped (or reused) for newer tenants so far."""
        self._fold()
        return self._evicted

    def lane(self, name: str) -> SLOTracker:
        """The tracker of lane ``name``."""
        self._fold()
        tracker = self._lanes.get(name)
        if tracker is None:
            raise UsageError(f"unknown lane {name!r}; lanes are {', '.join(self._lanes)}")
        return tracker

    def tenant(self, lane: str, tenant: str, *, now: float) -> SLOSnapshot | None:
        """A snapshot of ``tenant``'s tracker in ``lane`` at ``now`` (monotonic
        seconds), or ``None`` when none is held (does not refresh its LRU
        place). A snapshot, not the tracker: an evicted tenant's tracker is
        reused for another tenant of the lane."""
        self._fold()
        tracker = self._tenants.get((lane, tenant))
        return None if tracker is None else tracker.snapshot(now=now)

    def tenants(self) -> Iterator[tuple[tuple[str, str], SLOTracker]]:
        """``((lane, tenant), tracker)`` pairs, least recently used first."""
        self._fold()
        return iter(list(self._tenants.items()))

    def record(self, finished: Finished, *, now: float) -> None:
        """Count ``finished`` in its lane's tracker and its tenant's (O(1) amortized)."""
        lane = self.lane(finished.lane)
        check_now(now)
        if finished.outcome is Outcome.REJECTED:
            lane.record(finished, now=now)  # validates before anything changes
            self._record_rejected_tenant(finished.lane, finished.tenant, now)
            return
        # A tenant's tracker shares its lane's targets and cost model, so the
        # request is checked and judged once for both.
        self._add(lane, lane._judge(finished), now)  # validates before anything changes

    def _record_checked(self, finished: Finished, now: float) -> None:
        """:meth:`record` of a record the policy made itself (timings from
        checked monotonic times, not ``REJECTED``) at a checked ``now``,
        counted in the next fold. With the default cost model it is judged
        there too; a custom cost model is asked now, so a bad one raises here,
        in the call that finished the request."""
        lane = self._lanes[finished.lane]
        pending = self._pending
        if self._cost_model is None:
            pending.append((lane, finished, now))
        else:
            pending.append((lane, lane._judge_checked(finished), now))
        if len(pending) >= FOLD_AFTER:
            self._fold()

    def _fold(self) -> None:
        """Count the records waiting, oldest first."""
        if self._pending:
            pending, self._pending = self._pending, []
            add = self._add
            for lane, record, now in pending:
                if isinstance(record, Finished):
                    record = lane._judge_checked(record)
                add(lane, record, now)

    def _add(self, lane: SLOTracker, judged: Judged, now: float) -> None:
        lane._add(judged, now)
        tenant = self._tenant_tracker(lane.lane, judged.finished.tenant)
        if tenant is not None:
            tenant._add(judged, now)

    def record_rejected(self, lane: str, tenant: str | None, *, now: float) -> None:
        """Count a request refused before it ran, in ``lane`` (and ``tenant``'s tracker)."""
        check_now(now)
        self._record_rejected(lane, tenant, now)

    def _record_rejected(self, lane: str, tenant: str | None, now: float) -> None:
        """:meth:`record_rejected` at a checked ``now`` (the policy's refusals)."""
        self.lane(lane)._record_rejected(now)  # folds what waits first: records stay in order
        if tenant is not None:
            self._record_rejected_tenant(lane, tenant, now)

    def snapshots(self, *, now: float, tenants: bool = True) -> tuple[SLOSnapshot, ...]:
        """Every lane's snapshot, then (when ``tenants``) every tenant's, at ``now``."""
        self._fold()
        found = [tracker.snapshot(now=now) for tracker in self._lanes.values()]
        if tenants:
            found.extend(tracker.snapshot(now=now) for tracker in self._tenants.values())
        return tuple(found)

    def _record_rejected_tenant(self, lane: str, tenant: str, now: float) -> None:
        tracker = self._tenant_tracker(lane, tenant)
        if tracker is not None:
            tracker._record_rejected(now)

    def _tenant_tracker(self, lane: str, tenant: str) -> SLOTracker | None:
        if self.max_tenants == 0:
            return None
        key = (lane, tenant)
        tracker = self._tenants.get(key)
        if tracker is not None:
            self._tenants.move_to_end(key)
            return tracker
        if len(self._tenants) >= self.max_tenants:
            _, evicted = self._tenants.popitem(last=False)
            self._evicted += 1
            if evicted.lane == lane:  # same targets: reuse it, slots and all
                evicted._recycle(tenant)
                self._tenants[key] = evicted
                return evicted
        tracker = SLOTracker(
            lane,
            self._lanes[lane].targets,
            tenant=tenant,
            cost_model=self._cost_model,
            window_s=self._window_s,
            slices=self._slices,
            alpha=self._alpha,
            burn_rules=(),
            breakdown=False,
            tbt=False,
            rejected_are_errors=self._rejected_are_errors,
        )
        self._tenants[key] = tracker
        return tracker
