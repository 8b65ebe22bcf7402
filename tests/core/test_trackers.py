from __future__ import annotations

from collections import OrderedDict
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from slopolicy.core.outcome import Outcome
from slopolicy.core.slo.targets import SLOTargets
from slopolicy.core.slo.tracker_set import FOLD_AFTER, TrackerSet
from slopolicy.errors import UsageError
from tests.core.records import finished

LANES = {"interactive": SLOTargets(ttft_p95=1.0), "batch": SLOTargets(e2e_p95=600.0)}


def test_tenant_trackers_stay_bounded_under_a_hundred_thousand_tenants() -> None:
    trackers = TrackerSet(LANES, max_tenants=100, burn_rules=())
    for index in range(100_000):
        now = index * 0.001
        if index % 2:
            trackers.record(finished(now, tenant=f"t{index}"), now=now)
        else:
            trackers.record_rejected("interactive", f"t{index}", now=now)
        assert trackers.tenant_count <= 100
    assert trackers.tenant_count == 100
    assert trackers.evicted == 100_000 - 100
    # The most recent tenants are the ones kept.
    assert trackers.tenant("interactive", "t99999", now=100.0) is not None
    assert trackers.tenant("interactive", "t0", now=100.0) is None
    lane = trackers.lane("interactive").snapshot(now=100.0)
    assert lane.completed + lane.rejected == 55_000  # the window at 100 s covers [45, 100]


def test_an_evicted_tenants_tracker_is_reused_with_nothing_of_its_past() -> None:
    trackers = TrackerSet(LANES, max_tenants=1, burn_rules=())
    for k in range(3):
        trackers.record(finished(1.0 + k, tenant="old", ttft=5.0), now=1.0 + k)
    old = trackers._tenants[("interactive", "old")]
    assert trackers.tenant("interactive", "old", now=3.0) == old.snapshot(now=3.0)
    trackers.record(finished(10.0, tenant="new", ttft=0.1), now=10.0)
    new = trackers._tenants[("interactive", "new")]
    assert new is old  # the same object, recycled...
    assert trackers.tenant("interactive", "old", now=10.0) is None
    snap = trackers.tenant("interactive", "new", now=10.0)
    assert snap is not None
    assert (snap.tenant, snap.completed) == ("new", 1)  # ...holding only its new tenant's
    assert snap.ttft is not None
    assert snap.ttft.p99 == pytest.approx(0.1, rel=0.01)
    assert snap.span_s == 5.0  # it started at 10 s: one 5 s slice, where the lane has 9 s
    assert trackers.lane("interactive").span(now=10.0) == 9.0
    trackers.record(finished(11.0, lane="batch", tenant="other"), now=11.0)
    other = trackers._tenants[("batch", "other")]
    assert other is not old
    assert other.targets == LANES["batch"]


def test_the_policys_records_wait_in_a_bounded_batch_and_every_read_sees_them() -> None:
    trackers = TrackerSet(LANES, max_tenants=10, burn_rules=())
    for k in range(FOLD_AFTER + 10):
        trackers._record_checked(finished(1.0 + k * 1e-3, tenant=f"t{k % 20}"), 1.0 + k * 1e-3)
        assert len(trackers._pending) < FOLD_AFTER  # folded once the batch is full
    assert trackers._pending  # the last ones still wait...
    # ...and any read counts them first, in order with what is recorded after.
    trackers.record_rejected("interactive", "t0", now=2.0)
    snap = trackers.lane("interactive").snapshot(now=2.0)
    assert (snap.completed, snap.rejected) == (FOLD_AFTER + 10, 1)
    assert trackers.tenant_count == 10
    # 20 tenants rotate over 10 places: every record after the first 10 evicts one.
    assert trackers.evicted == FOLD_AFTER


_STEPS = st.lists(
    st.tuples(
        st.sampled_from(("completed", "failed", "rejected", "read")),
        st.sampled_from(tuple(LANES)),
        st.integers(0, 5),  # the tenant: more than the places kept, so some are evicted
        st.floats(0.0, 3.0),  # seconds since the step before, and the TTFT
    ),
    max_size=120,
)


def _fold_run(steps: list[tuple[str, str, int, float]], fold_after: int) -> list[object]:
    """Every read of a tracker set fed ``steps``, folding every ``fold_after`` records."""
    reads: list[object]
    with mock.patch("slopolicy.core.slo.tracker_set.FOLD_AFTER", fold_after):
        trackers = TrackerSet(LANES, max_tenants=3, burn_rules=())
        now, reads = 0.0, []
        for kind, lane, tenant, dt in steps:
            now += dt
            if kind == "read":
                reads.append((trackers.snapshots(now=now), trackers.evicted))
            elif kind == "rejected":
                trackers.record_rejected(lane, f"t{tenant}", now=now)
            else:
                record = finished(
                    now, lane=lane, tenant=f"t{tenant}", ttft=dt, outcome=Outcome(kind)
                )
                trackers._record_checked(record, now)
        reads.append((trackers.snapshots(now=now + 1.0), trackers.evicted))
        return reads


@settings(max_examples=60, deadline=None)
@given(_STEPS)
def test_the_batched_fold_reads_as_recording_one_at_a_time(
    steps: list[tuple[str, str, int, float]],
) -> None:
    # A differential test: folding after every record is the unbatched order.
    assert _fold_run(steps, 1) == _fold_run(steps, FOLD_AFTER)


def test_a_bad_cost_model_raises_when_the_policy_records_not_later() -> None:
    trackers = TrackerSet(LANES, cost_model=lambda _: -1.0)
    with pytest.raises(UsageError, match="cost model"):
        trackers._record_checked(finished(1.0), 1.0)
    assert trackers.lane("interactive").snapshot(now=1.0).completed == 0


class TrackerSetMachine(RuleBasedStateMachine):
    """The tenant table against an OrderedDict used as an LRU."""

    def __init__(self) -> None:
        super().__init__()
        self.trackers = TrackerSet(LANES, max_tenants=3, burn_rules=())
        self.model: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.now = 0.0

    @rule(dt=st.sampled_from([0.0, 1.0, 30.0, 100.0]))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(
        lane=st.sampled_from(sorted(LANES)),
        tenant=st.sampled_from(["a", "b", "c", "d", "e"]),
        rejected=st.booleans(),
    )
    def record(self, lane: str, tenant: str, rejected: bool) -> None:
        if rejected:
            self.trackers.record_rejected(lane, tenant, now=self.now)
        else:
            self.trackers.record(finished(self.now, lane=lane, tenant=tenant), now=self.now)
        key = (lane, tenant)
        self.model[key] = self.model.get(key, 0) + 1
        self.model.move_to_end(key)
        if len(self.model) > 3:
            self.model.popitem(last=False)

    @invariant()
    def same_tenants_in_the_same_order(self) -> None:
        assert [key for key, _ in self.trackers.tenants()] == list(self.model)
        assert self.trackers.tenant_count <= 3

    @invariant()
    def each_tenant_sees_only_its_requests(self) -> None:
        for (lane, tenant), tracker in self.trackers.tenants():
            assert (tracker.lane, tracker.tenant) == (lane, tenant)
            assert tracker.targets == LANES[lane]


TestTrackerSet = TrackerSetMachine.TestCase
TestTrackerSet.settings = settings(max_examples=40, stateful_step_count=30)


def test_snapshots_cover_lanes_then_tenants() -> None:
    trackers = TrackerSet(LANES)
    trackers.record(finished(1.0, tenant="acme"), now=1.0)
    trackers.record(finished(1.0, lane="batch", tenant="acme", outcome=Outcome.FAILED), now=1.0)
    snaps = trackers.snapshots(now=2.0)
    assert [(s.lane, s.tenant) for s in snaps] == [
        ("interactive", None),
        ("batch", None),
        ("interactive", "acme"),
        ("batch", "acme"),
    ]
    assert snaps[1].failed == 1
    assert snaps[2].burn_rates == ()  # tenants keep the short window only
    assert snaps[2].breakdown is None
    assert len(trackers.snapshots(now=2.0, tenants=False)) == 2
    assert trackers.lanes == ("interactive", "batch")


def test_unknown_lanes_are_misuse_and_change_nothing() -> None:
    trackers = TrackerSet(LANES)
    with pytest.raises(UsageError, match="unknown lane"):
        trackers.record(finished(1.0, lane="gold"), now=1.0)
    with pytest.raises(UsageError, match="unknown lane"):
        trackers.record_rejected("gold", "acme", now=1.0)
    assert trackers.tenant_count == 0


def test_zero_tenants_keeps_lanes_only() -> None:
    trackers = TrackerSet(LANES, max_tenants=0)
    trackers.record(finished(1.0), now=1.0)
    assert trackers.tenant_count == 0
    assert trackers.lane("interactive").snapshot(now=1.0).completed == 1
    with pytest.raises(UsageError):
        TrackerSet({})
    with pytest.raises(UsageError):
        TrackerSet(LANES, max_tenants=-1)
