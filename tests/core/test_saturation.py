"""Saturation: the decayed part of the recent time the engine held work back."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from slopolicy.core.queueing.saturation import SATURATED, Saturation
from slopolicy.errors import UsageError


def test_nothing_reported_reads_as_never_saturated() -> None:
    saturation = Saturation(10.0)
    assert saturation.fraction(now=5.0) == 0.0
    saturation.report(True, now=5.0)
    assert saturation.fraction(now=5.0) == 0.0  # no time has passed in that state


def test_a_short_history_counts_in_full() -> None:
    # Saturated since the first report: 1, however little time has passed.
    saturation = Saturation(10.0)
    saturation.report(True, now=0.0)
    assert saturation.fraction(now=0.5) == pytest.approx(1.0)
    saturation.report(False, now=1.0)
    assert saturation.fraction(now=2.0) == pytest.approx(
        (math.exp(-1.0 / 10.0) - math.exp(-2.0 / 10.0)) / (1.0 - math.exp(-2.0 / 10.0))
    )


def test_the_state_between_reports_is_the_earlier_ones() -> None:
    # Half of each second saturated, for long: about half, whatever the phase.
    saturation = Saturation(10.0)
    for second in range(200):
        saturation.report(True, now=second)
        saturation.report(False, now=second + 0.5)
    assert saturation.fraction(now=200.0) == pytest.approx(0.5, abs=0.03)


def test_the_past_fades_with_the_window() -> None:
    saturation = Saturation(10.0)
    saturation.report(True, now=0.0)
    saturation.report(False, now=100.0)
    # After one window idle, a saturated past of ten windows weighs e^-1 of
    # the total (the history is long enough to be the whole window's worth).
    assert saturation.fraction(now=110.0) == pytest.approx(math.exp(-1.0), rel=1e-3)
    assert saturation.fraction(now=110.0) < SATURATED
    assert saturation.fraction(now=200.0) < 1e-4


def test_reading_does_not_change_what_is_read_later() -> None:
    read, unread = Saturation(5.0), Saturation(5.0)
    for saturation in (read, unread):
        saturation.report(True, now=0.0)
    for t in (0.3, 1.7, 2.2, 2.9):
        read.fraction(now=t)
    for saturation in (read, unread):
        saturation.report(False, now=3.0)
    assert read.fraction(now=7.0) == pytest.approx(unread.fraction(now=7.0), rel=1e-12)


def test_a_clock_that_went_back_counts_as_the_latest_report() -> None:
    saturation, reference = Saturation(10.0), Saturation(10.0)
    for kept in (saturation, reference):
        kept.report(True, now=10.0)
        kept.report(False, now=12.0)
    assert saturation.fraction(now=3.0) == saturation.fraction(now=12.0)
    saturation.report(True, now=5.0)  # counts as a report at 12 s
    reference.report(True, now=12.0)
    assert saturation.fraction(now=20.0) == pytest.approx(reference.fraction(now=20.0))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.report(1, now=0.0), "saturated must be a bool"),
        (lambda s: s.report(True, now=math.nan), "now must be"),
        (lambda s: s.fraction(now=math.inf), "now must be"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(call: object, match: str) -> None:
    saturation = Saturation(5.0)
    saturation.report(True, now=0.0)
    saturation.report(False, now=1.0)
    before = (saturation._at, saturation._held, saturation._seen, saturation._saturated)
    with pytest.raises(UsageError, match=match):
        call(saturation)  # type: ignore[operator]
    assert (saturation._at, saturation._held, saturation._seen, saturation._saturated) == before


@pytest.mark.parametrize("window", [0.0, -1.0, math.inf, math.nan, 5e-324, 1e-4])
def test_a_bad_window_is_refused(window: float) -> None:
    with pytest.raises(UsageError, match="window_s"):
        Saturation(window)


@given(
    steps=st.lists(
        st.tuples(st.floats(-5.0, 50.0, allow_nan=False), st.booleans()), min_size=1, max_size=40
    ),
    window=st.floats(0.1, 100.0),
)
def test_the_fraction_is_the_decayed_time_saturated(
    steps: list[tuple[float, bool]], window: float
) -> None:
    """Against a direct integral of ``e^((t - now) / window)`` over the
    reported states; a report dated before the latest one takes effect
    from that one's time."""
    saturation = Saturation(window)
    spans: list[tuple[float, float, bool]] = []
    clock, state = steps[0]
    saturation.report(state, now=clock)
    for t, reported in steps[1:]:
        saturation.report(reported, now=t)
        if t > clock:
            spans.append((clock, t, state))
            clock = t
        state = reported
    now = clock + 1.0
    spans.append((clock, now, state))

    def weight(start: float, end: float) -> float:
        return window * (math.exp((end - now) / window) - math.exp((start - now) / window))

    seen = sum(weight(a, b) for a, b, _ in spans)
    held = sum(weight(a, b) for a, b, saturated in spans if saturated)
    assert saturation.fraction(now=now) == pytest.approx(held / seen, abs=1e-9)


#: A wait: none, or one long enough to weigh (a denormal one rounds to nothing).
_WAITS = st.one_of(st.just(0.0), st.floats(0.001, 20.0))


class Reports(RuleBasedStateMachine):
    """Any reports and reads: the fraction stays in [0, 1]; it is 1 while
    only saturated time has passed and 0 while none has."""

    def __init__(self) -> None:
        super().__init__()
        self.saturation = Saturation(3.0)
        self.now = 0.0
        self.state: bool | None = None  # the state in effect
        self.passed: set[bool] = set()  # the states some time passed in

    def _wait(self, dt: float) -> None:
        if dt > 0 and self.state is not None:
            self.passed.add(self.state)
        self.now += dt

    @rule(dt=_WAITS, saturated=st.booleans())
    def report(self, dt: float, saturated: bool) -> None:
        self._wait(dt)
        self.saturation.report(saturated, now=self.now)
        self.state = saturated

    @rule(dt=_WAITS)
    def read(self, dt: float) -> None:
        self._wait(dt)
        self.saturation.fraction(now=self.now)

    @invariant()
    def within_bounds(self) -> None:
        fraction = self.saturation.fraction(now=self.now)
        assert 0.0 <= fraction <= 1.0
        if self.passed == {True}:
            assert fraction == pytest.approx(1.0)
        if True not in self.passed:
            assert fraction == 0.0


TestReports = Reports.TestCase
