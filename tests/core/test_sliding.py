from __future__ import annotations

import math

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from slopolicy.core.slo.sketches import SlidingQuantiles, SlidingSketches
from slopolicy.core.slo.windows import SlidingCounts, SlidingRing
from slopolicy.errors import UsageError
from tests.core.test_quantiles import QS, assert_within, exact

# Times on a 1/8 s grid keep floor(t / width) clear of float rounding, so the
# model and the documented rule agree exactly.
_steps = st.integers(min_value=0, max_value=8 * 90).map(lambda n: n / 8)
_values = st.floats(min_value=1e-6, max_value=1e6)


class SlidingQuantilesMachine(RuleBasedStateMachine):
    """SlidingQuantiles against a naive list of every value with its time."""

    def __init__(self) -> None:
        super().__init__()
        self.window = SlidingQuantiles(60.0, 12)
        self.counts = SlidingCounts(60.0, 12, 1)
        self.now = 0.0
        self.latest = -math.inf  # the latest time the window has seen
        self.seen: list[tuple[float, float]] = []  # (effective time, value)

    def see(self, t: float) -> float:
        self.latest = max(self.latest, t)
        return self.latest

    @initialize(start=st.integers(min_value=0, max_value=8 * 1000).map(lambda n: n / 8))
    def start(self, start: float) -> None:
        self.now = start

    @rule(dt=_steps)
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(value=_values)
    def record(self, value: float) -> None:
        self.window.record(value, now=self.now)
        self.counts.add(now=self.now, field=0, amount=value)
        self.seen.append((self.see(self.now), value))

    @rule(value=_values, early=st.integers(min_value=1, max_value=8 * 100).map(lambda n: n / 8))
    def record_late(self, value: float, early: float) -> None:
        # A now earlier than the latest seen counts as the latest.
        self.window.record(value, now=self.now - early)
        self.counts.add(now=self.now - early, field=0, amount=value)
        self.seen.append((self.see(self.now - early), value))

    def live(self) -> list[float]:
        current = math.floor(self.see(self.now) / 5.0)
        return [v for t, v in self.seen if math.floor(t / 5.0) > current - 12]

    @invariant()
    def forgets_exactly_as_documented(self) -> None:
        live = self.live()
        for t, _ in self.seen:
            age = self.latest - t
            kept = math.floor(t / 5.0) > math.floor(self.latest / 5.0) - 12
            if age >= 60.0:
                assert not kept  # older than the window: always gone
            if age < 55.0:
                assert kept  # younger than window - slice: always counted
        assert self.window.count(now=self.now) == len(live)

    @invariant()
    def quantiles_match_the_live_values(self) -> None:
        live = self.live()
        assert self.counts.totals(now=self.now)[0] == pytest.approx(math.fsum(live))
        if not live:
            assert self.window.quantile(0.5, now=self.now) is None
            return
        answers = self.window.quantiles(QS, now=self.now)
        for q, answer in zip(QS, answers, strict=True):
            assert_within(answer, exact(live, q), 0.01)


TestSlidingQuantiles = SlidingQuantilesMachine.TestCase
TestSlidingQuantiles.settings = settings(max_examples=60, stateful_step_count=40)


def test_a_value_stays_for_window_minus_a_slice_and_is_gone_after_the_window() -> None:
    window = SlidingQuantiles(60.0, 12)
    window.record(1.0, now=100.0)  # slice [100, 105)
    assert window.count(now=154.9) == 1  # age 54.9 < 55: always kept
    assert window.count(now=159.9) == 1  # its slice is still live until 160
    assert window.count(now=160.0) == 0  # the slice expired; age 60 here
    window.record(2.0, now=120.0)
    assert window.count(now=130.0) == 1  # a late query counts as now=160
    window.record(3.0, now=10.0)  # late: lands in the current slice
    assert window.quantile(1.0, now=0.0) == pytest.approx(3.0, rel=0.01)


def test_slots_are_reused_not_reallocated() -> None:
    made: list[list[float]] = []

    def factory() -> list[float]:
        made.append([0.0])
        return made[-1]

    ring: SlidingRing[list[float]] = SlidingRing(10.0, 5, factory, lambda slot: slot.clear())
    for step in range(1000):
        ring.current(now=step * 0.7)
    assert len(made) == 5


def test_window_start_and_covered_span() -> None:
    counts = SlidingCounts(60.0, 12, 2)
    assert counts.width == 5.0
    assert counts.start(now=103.0) == 105.0 - 60.0
    assert 55.0 <= 103.0 - counts.start(now=103.0) <= 60.0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_times_are_misuse(bad: float) -> None:
    window = SlidingQuantiles()
    window.record(1.0, now=5.0)
    with pytest.raises(UsageError, match="finite"):
        window.record(1.0, now=bad)
    assert window.count(now=5.0) == 1


def test_bad_windows_are_refused() -> None:
    with pytest.raises(UsageError):
        SlidingQuantiles(0.0, 12)
    with pytest.raises(UsageError):
        SlidingQuantiles(60.0, 0)
    with pytest.raises(UsageError):
        SlidingCounts(60.0, 12, 0)
    with pytest.raises(UsageError):
        SlidingSketches(-1)


def test_several_metrics_share_one_ring() -> None:
    window = SlidingSketches(2, 1, window_s=10.0, slices=2)
    piece = window.current(now=1.0)
    piece.sketch(0).add(1.0)
    piece.pending[1].append(9.0)  # waits to be folded until read
    piece.sums[0] += 3.0
    assert window.sketch(0, now=1.0).quantile(0.5) == pytest.approx(1.0, rel=0.01)
    assert window.sketch(1, now=2.0).quantile(0.5) == pytest.approx(9.0, rel=0.01)
    assert window.totals(now=2.0) == [3.0]
    assert window.count(1, now=12.0) == 0


def test_pending_values_are_folded_when_read_and_dropped_with_their_slice() -> None:
    window = SlidingSketches(1, 0, window_s=10.0, slices=2)
    piece = window.current(now=1.0)
    piece.pending[0].extend([1.0, 2.0, 3.0])
    assert window.count(0, now=1.0) == 3
    assert piece.pending[0] == []
    piece.pending[0].append(4.0)
    piece.fold()
    assert piece.pending[0] == []
    assert window.sketch(0, now=1.0).max == 4.0
    window.current(now=11.0).pending[0].append(5.0)  # the same slot, a new slice
    window.current(now=21.0).pending[0].append(6.0)  # and again: 5.0 is gone unread
    assert window.sketch(0, now=21.0).count == 1
