from __future__ import annotations

import math

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from slopolicy.core.slo.burn import (
    DEFAULT_BURN_RULES,
    AlertSeverity,
    BurnRate,
    BurnRule,
    BurnWindows,
)
from slopolicy.core.slo.targets import Objective
from slopolicy.errors import UsageError

GOALS = ((Objective.SUCCESS, 0.99), (Objective.TTFT_P95, 0.95))
BUCKETS = 6


class BurnMachine(RuleBasedStateMachine):
    """BurnWindows against a naive list of every verdict with its time.

    The model applies the documented window rule (a bucket of width
    ``W / buckets`` holds ``floor(t / width)``; the live buckets are the last
    ``buckets``) and the documented alert rule (both windows strictly above).
    """

    def __init__(self) -> None:
        super().__init__()
        self.burn = BurnWindows(GOALS, DEFAULT_BURN_RULES, buckets=BUCKETS)
        self.now = 0.0
        self.events: list[tuple[float, tuple[bool | None, bool | None]]] = []

    # Steps on a 1/8 s grid, from a moment to more than a day.
    @rule(dt=st.sampled_from([0.125, 1.0, 30.0, 240.0, 1500.0, 4000.0, 20000.0, 100000.0]))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(
        success=st.sampled_from([True, False, None]),
        ttft=st.sampled_from([True, False, None]),
        repeat=st.integers(min_value=1, max_value=30),
    )
    def record(self, success: bool | None, ttft: bool | None, repeat: int) -> None:
        for _ in range(repeat):
            self.burn.record(now=self.now, verdicts=(success, ttft))
            self.events.append((self.now, (success, ttft)))

    def model_rate(self, index: int, window: float) -> tuple[int, int]:
        width = window / BUCKETS
        current = math.floor(self.now / width)
        live = [v[index] for t, v in self.events if math.floor(t / width) > current - BUCKETS]
        counted = [bad for bad in live if bad is not None]
        return len(counted), sum(counted)

    @invariant()
    def rates_match_the_model(self) -> None:
        for rate in self.burn.rates(now=self.now):
            index = [objective for objective, _ in GOALS].index(rate.objective)
            assert (rate.events, rate.bad) == self.model_rate(index, rate.window_s)

    @invariant()
    def alerts_fire_exactly_when_both_windows_exceed(self) -> None:
        expected = set()
        for index, (objective, goal) in enumerate(GOALS):
            for rule_ in DEFAULT_BURN_RULES:
                burns = []
                for window in (rule_.long_s, rule_.short_s):
                    events, bad = self.model_rate(index, window)
                    burns.append(None if events == 0 else (bad / events) / (1 - goal))
                if all(b is not None and b > rule_.threshold for b in burns):
                    expected.add((objective, rule_))
        fired = {
            (a.objective, BurnRule(a.severity, a.long.window_s, a.short.window_s, a.threshold))
            for a in self.burn.alerts(now=self.now)
        }
        assert fired == expected


TestBurnWindows = BurnMachine.TestCase
TestBurnWindows.settings = settings(max_examples=60, stateful_step_count=30)


def _fill(burn: BurnWindows, start: float, end: float, every: float, bad_every: int) -> float:
    t, n = start, 0
    while t < end:
        n += 1
        burn.record(now=t, verdicts=(n % bad_every == 0,))
        t += every
    return t


def test_a_sustained_outage_pages_and_the_page_stops_soon_after() -> None:
    burn = BurnWindows(((Objective.SUCCESS, 0.99),))
    t = _fill(burn, 0.0, 7200.0, 1.0, 1000)  # 0.1% errors: burn 0.1
    assert burn.alerts(now=t) == ()
    t = _fill(burn, t, t + 1800.0, 1.0, 2)  # 50% errors for 30 min: burn 50
    fired = burn.alerts(now=t)
    assert {(a.severity, a.long.window_s) for a in fired} >= {
        (AlertSeverity.PAGE, 3600.0),
        (AlertSeverity.PAGE, 21600.0),
    }
    page = next(a for a in fired if a.long.window_s == 3600.0)
    assert page.short.rate == pytest.approx(50.0, rel=0.05)
    assert "page: success burning error budget" in page.message
    # Healthy again: after the 5-minute window passes, the fast page stops
    # even though the hour is still burning hot.
    t = _fill(burn, t, t + 400.0, 1.0, 1000)
    long_rate = next(r for r in burn.rates(now=t) if r.window_s == 3600.0).rate
    assert long_rate is not None
    assert long_rate > 14.4
    assert all(a.long.window_s != 3600.0 for a in burn.alerts(now=t))


def test_a_short_spike_alone_does_not_page() -> None:
    burn = BurnWindows(((Objective.SUCCESS, 0.99),))
    t = _fill(burn, 0.0, 3600.0, 0.5, 10_000)
    t = _fill(burn, t, t + 60.0, 0.5, 1)  # one minute of total failure
    short = next(r for r in burn.rates(now=t) if r.window_s == 300.0)
    assert short.rate is not None
    assert short.rate > 14.4
    assert not any(a.long.window_s == 3600.0 for a in burn.alerts(now=t))


def test_burn_rate_arithmetic() -> None:
    rate = BurnRate(Objective.SUCCESS, 3600.0, 0.999, events=1000, bad=2)
    assert rate.error_rate == 0.002
    assert rate.rate == pytest.approx(2.0)
    assert BurnRate(Objective.SUCCESS, 60.0, 0.99, 0, 0).rate is None
    assert BurnRate(Objective.SUCCESS, 60.0, 1.0, 5, 1).rate == math.inf
    assert BurnRate(Objective.SUCCESS, 60.0, 1.0, 5, 0).rate == 0.0


def test_windows_are_the_rules_windows() -> None:
    burn = BurnWindows(GOALS)
    assert burn.windows == (300.0, 1800.0, 3600.0, 21600.0, 259200.0)
    assert len(burn.rates(now=0.0)) == 2 * 5


def test_misuse() -> None:
    with pytest.raises(UsageError):
        BurnRule(AlertSeverity.PAGE, 60.0, 300.0, 1.0)
    with pytest.raises(UsageError):
        BurnWindows(())
    with pytest.raises(UsageError, match="verdicts"):
        BurnWindows(GOALS).record(now=0.0, verdicts=(True,))
