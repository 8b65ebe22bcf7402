from __future__ import annotations

import math
import random
import tracemalloc
from dataclasses import FrozenInstanceError
from fractions import Fraction

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from slopolicy.core.quota.bucket import BucketStatistics, TokenBucket
from slopolicy.errors import UsageError

# 10**400 is finite but too large for a float: it used to pass the checks and
# overflow in the arithmetic after them, with the level or the clock moved.
BAD_AMOUNTS = (-1.0, -1e-300, math.nan, math.inf, -math.inf, 10**400)
# 1.7e18 is a time.time_ns() value, 1.7e12 milliseconds since the epoch.
BAD_NOWS = (math.nan, math.inf, -math.inf, 10**400, -(10**400), 1.7e18, 1.7e12)


def test_starts_full_and_grants_until_empty() -> None:
    bucket = TokenBucket(2.0, 10.0, now=5.0)
    assert bucket.level(now=5.0) == 10.0
    assert bucket.try_acquire(6.0, now=5.0)
    assert bucket.try_acquire(4.0, now=5.0)
    assert bucket.time_until(1.0, now=5.0) == 0.5  # 1 cost unit at 2 per second
    assert not bucket.try_acquire(1.0, now=5.0)
    assert bucket.level(now=5.0) == 0.0
    assert bucket.try_acquire(1.0, now=5.5)


def test_refused_takes_nothing_and_says_how_long() -> None:
    bucket = TokenBucket(4.0, 8.0)
    bucket.try_acquire(6.0, now=0.0)
    assert bucket.time_until(5.0, now=0.0) == 0.75
    assert not bucket.try_acquire(5.0, now=0.0)
    assert bucket.level(now=0.0) == 2.0
    assert bucket.statistics(now=0.0).refused == 1
    assert bucket.try_acquire(5.0, now=0.75)


def test_a_cost_over_the_burst_is_never_granted() -> None:
    bucket = TokenBucket(1.0, 10.0)
    assert bucket.time_until(10.5, now=0.0) == math.inf
    assert bucket.time_until(10.5, now=1e9) == math.inf
    assert not bucket.try_acquire(10.5, now=1e9)
    assert bucket.level(now=1e9) == 10.0
    assert bucket.try_acquire(10.0, now=0.0)  # exactly the burst is fine


def test_cost_zero_is_granted_even_in_debt() -> None:
    bucket = TokenBucket(1.0, 10.0)
    bucket.charge(15.0, now=0.0)
    assert bucket.level(now=0.0) == -5.0
    assert bucket.time_until(0.0, now=0.0) == 0.0
    assert bucket.try_acquire(0.0, now=0.0)
    assert bucket.time_until(1.0, now=0.0) == 6.0


def test_time_until_is_a_pure_read() -> None:
    bucket = TokenBucket(1.0, 10.0)
    bucket.try_acquire(10.0, now=0.0)
    before = bucket.statistics(now=0.0)
    assert bucket.time_until(3.0, now=1.0) == 2.0
    assert bucket.time_until(3.0, now=3.0) == 0.0
    assert bucket.statistics(now=0.0) == before


def test_debt_is_floored_at_minus_burst_and_the_rest_forgiven() -> None:
    bucket = TokenBucket(1.0, 10.0)
    bucket.try_acquire(10.0, now=0.0)
    bucket.charge(4.0, now=0.0)
    bucket.charge(9.0, now=0.0)
    stats = bucket.statistics(now=0.0)
    assert stats.level == -10.0
    assert stats.charged == 10.0
    assert stats.forgiven == 3.0
    # Debt is repaid by refill before the next grant.
    assert bucket.time_until(1.0, now=0.0) == 11.0


def test_refund_never_fills_past_the_burst() -> None:
    bucket = TokenBucket(1.0, 10.0)
    bucket.try_acquire(4.0, now=0.0)
    bucket.refund(7.0, now=0.0)
    stats = bucket.statistics(now=0.0)
    assert stats.level == 10.0
    assert stats.refunded == 4.0


def test_debt_is_the_only_way_past_rate_t_plus_burst() -> None:
    # Grants net of refunds stay within rate*T + burst; a charge can take one
    # more burst, but that is then owed: nothing is granted until it is repaid.
    bucket = TokenBucket(1.0, 10.0)
    assert bucket.try_acquire(10.0, now=0.0)
    bucket.charge(10.0, now=0.0)
    stats = bucket.statistics(now=0.0)
    assert stats.granted + stats.charged == 20.0  # 2 * burst in a window of length 0
    assert bucket.time_until(1.0, now=0.0) == 11.0


def test_a_clock_going_backwards_is_the_last_now_seen() -> None:
    bucket = TokenBucket(1.0, 10.0)
    bucket.try_acquire(10.0, now=10.0)
    # Treated as t=10: no refill; the grant is possible at t=11, 7 s after t=4.
    assert bucket.time_until(1.0, now=4.0) == 7.0
    assert not bucket.try_acquire(1.0, now=4.0)
    assert bucket.level(now=4.0) == 0.0
    bucket.refund(1.0, now=3.0)
    assert bucket.level(now=10.0) == 1.0
    assert bucket.level(now=12.0) == 3.0


def test_a_wait_asked_for_in_the_past_counts_from_that_past_now() -> None:
    bucket = TokenBucket(1.0, 10.0)
    bucket.try_acquire(10.0, now=10.0)
    # The earliest grant is at t=12; asked at t=4, that is 8 seconds away.
    assert bucket.time_until(2.0, now=4.0) == 8.0
    assert bucket.try_acquire(2.0, now=4.0 + 8.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate": 0.0, "burst": 1.0},
        {"rate": -1.0, "burst": 1.0},
        {"rate": math.inf, "burst": 1.0},
        {"rate": math.nan, "burst": 1.0},
        {"rate": 1.0, "burst": 0.0},
        {"rate": 1.0, "burst": math.inf},
        {"rate": 1.0, "burst": math.nan},
        {"rate": 1.0, "burst": 1.0, "now": math.nan},
        {"rate": 1.0, "burst": 1.0, "now": math.inf},
        {"rate": 1.0, "burst": 1.0, "level": 1.5},
        {"rate": 1.0, "burst": 1.0, "level": -1.5},
        {"rate": 1.0, "burst": 1.0, "level": math.nan},
    ],
)
def test_impossible_settings_are_usage_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(UsageError):
        TokenBucket(**kwargs)


@pytest.mark.parametrize("amount", BAD_AMOUNTS)
@pytest.mark.parametrize("method", ["try_acquire", "time_until", "charge", "refund"])
def test_bad_amounts_raise_and_change_nothing(method: str, amount: float) -> None:
    bucket = TokenBucket(1.0, 10.0)
    bucket.try_acquire(3.0, now=1.0)
    before = bucket.statistics(now=1.0)
    with pytest.raises(UsageError, match="finite number >= 0"):
        getattr(bucket, method)(amount, now=2.0)
    assert bucket.statistics(now=1.0) == before


@pytest.mark.parametrize("now", BAD_NOWS)
@pytest.mark.parametrize("method", ["try_acquire", "time_until", "charge", "refund"])
def test_bad_nows_raise_and_change_nothing(method: str, now: float) -> None:
    bucket = TokenBucket(1.0, 10.0)
    bucket.try_acquire(3.0, now=1.0)
    before = bucket.statistics(now=1.0)
    with pytest.raises(UsageError, match="monotonic seconds"):
        getattr(bucket, method)(1.0, now=now)
    with pytest.raises(UsageError):
        bucket.level(now=now)
    assert bucket.statistics(now=1.0) == before


def test_statistics_are_a_frozen_snapshot() -> None:
    bucket = TokenBucket(1.0, 10.0)
    bucket.try_acquire(2.0, now=0.0)
    stats = bucket.statistics(now=1.0)
    assert stats == BucketStatistics(1.0, 10.0, 9.0, 2.0, 0, 0.0, 0.0, 0.0)
    with pytest.raises(FrozenInstanceError):
        stats.level = 0.0  # type: ignore[misc]
    bucket.try_acquire(5.0, now=1.0)
    assert stats.level == 9.0


_positive = st.floats(1e-3, 1e6, allow_nan=False)


@given(
    rate=_positive,
    burst=_positive,
    fill=st.floats(-1.0, 1.0),
    start=st.floats(-1e9, 1e9),
    delay=st.floats(0.0, 1e4),
    fraction=st.floats(0.0, 1.5),
)
def test_the_wait_is_exact_and_never_short(
    rate: float, burst: float, fill: float, start: float, delay: float, fraction: float
) -> None:
    cost = burst * fraction
    now = start + delay

    def bucket() -> TokenBucket:
        return TokenBucket(rate, burst, now=start, level=burst * fill)

    wait = bucket().time_until(cost, now=now)
    note(f"wait={wait!r}")
    if wait == 0.0:
        assert bucket().try_acquire(cost, now=now)
        return
    if wait == math.inf:
        assert cost > burst
        return
    assert not bucket().try_acquire(cost, now=now)
    assert bucket().try_acquire(cost, now=now + wait)
    level = bucket().level(now=now)
    exact = (Fraction(cost) - Fraction(level)) / Fraction(rate)
    # Off by float rounding only: of the level, and of the time itself.
    slack = 2 * math.ulp(burst) / rate + 2 * math.ulp(now + wait)
    assert abs(Fraction(wait) - exact) <= slack


def test_no_drift_over_ten_million_simulated_seconds() -> None:
    # 10^5 operations with steps averaging 100 s: grants, refunds and charges
    # on awkward (non-binary) numbers, against exact rational arithmetic.
    rng = random.Random(20240611)
    rate, burst = 3.7, 1234.5
    bucket = TokenBucket(rate, burst, now=0.0)
    level, last = Fraction(burst), Fraction(0)
    tolerance = 1e-9 * burst
    now = 0.0
    for _ in range(100_000):
        now += rng.uniform(0.0, 200.0)
        exact_now = Fraction(now)
        level = min(Fraction(burst), level + Fraction(rate) * (exact_now - last))
        last = exact_now
        amount = rng.uniform(0.0, 800.0)
        kind = rng.random()
        if kind < 0.6:
            granted = bucket.try_acquire(amount, now=now)
            # The float bucket decides; it must agree with exact arithmetic but
            # for a sliver of rounding at the boundary.
            assert granted == (level >= Fraction(amount)) or abs(level - Fraction(amount)) <= (
                tolerance
            )
            if granted:
                level -= Fraction(amount)
        elif kind < 0.8:
            bucket.refund(amount, now=now)
            level = min(Fraction(burst), level + Fraction(amount))
        else:
            bucket.charge(amount, now=now)
            level = max(-Fraction(burst), level - Fraction(amount))
        assert abs(Fraction(bucket.level(now=now)) - level) <= tolerance
    assert now > 9.9e6


def _traced_size_after_grants(cost: float) -> int:
    tracemalloc.start()
    try:
        buckets = [TokenBucket(1e12, 1e12) for _ in range(1000)]
        for step in range(100):
            for bucket in buckets:
                assert bucket.try_acquire(cost, now=float(step))
        size, _ = tracemalloc.get_traced_memory()
        return size
    finally:
        tracemalloc.stop()


def test_memory_does_not_depend_on_cost() -> None:
    one, hundred = _traced_size_after_grants(1.0), _traced_size_after_grants(100.0)
    assert abs(one - hundred) <= 0.05 * one, (one, hundred)


class _Model:
    """The bucket in exact arithmetic, spelled out the long way."""

    def __init__(self, rate: Fraction, burst: Fraction, now: Fraction) -> None:
        self.rate, self.burst, self.level, self.last = rate, burst, burst, now

    def at(self, now: Fraction) -> Fraction:
        if now <= self.last:
            return self.level
        return min(self.burst, self.level + self.rate * (now - self.last))

    def advance(self, now: Fraction) -> None:
        self.level, self.last = self.at(now), max(now, self.last)

    def wait(self, cost: Fraction, now: Fraction) -> Fraction | None:
        """Seconds until ``cost`` can be taken; None for never."""
        level = self.at(now)
        if cost <= level or cost == 0:
            return Fraction(0)
        if cost > self.burst:
            return None
        return max(now, self.last) + (cost - level) / self.rate - now


# Binary fractions keep every float operation exact, so the bucket must match
# the exact model to the bit, decisions and waits included.
_costs = st.integers(0, 64).map(lambda n: n / 4)
_steps = st.integers(0, 160).map(lambda n: n / 8)


class BucketMachine(RuleBasedStateMachine):
    """TokenBucket against the exact model; invariant 1 over every window."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        # (time, grants - refunds, grants + charges - refunds, level after) per event.
        self.events: list[tuple[Fraction, Fraction, Fraction, Fraction]] = []

    @initialize(
        rate=st.sampled_from([0.5, 1.0, 2.0, 8.0]),
        burst=st.sampled_from([1.0, 4.0, 10.0, 32.0]),
        start=st.integers(-100, 100).map(float),
    )
    def build(self, rate: float, burst: float, start: float) -> None:
        self.now = start
        self.bucket = TokenBucket(rate, burst, now=start)
        self.model = _Model(Fraction(rate), Fraction(burst), Fraction(start))

    def _record(self, admitted: Fraction, total: Fraction) -> None:
        # The bucket acts at the latest now it has seen, which is the model's.
        self.events.append((self.model.last, admitted, total, self.model.level))

    @rule(dt=_steps)
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(cost=_costs)
    def try_acquire(self, cost: float) -> None:
        wait = self.bucket.time_until(cost, now=self.now)
        assert self.bucket.try_acquire(cost, now=self.now) == (wait == 0.0)
        exact = self.model.wait(Fraction(cost), Fraction(self.now))
        self.model.advance(Fraction(self.now))
        if exact is None:
            assert wait == math.inf
        else:
            assert Fraction(wait) == exact
        if wait == 0.0:
            self.model.level -= Fraction(cost)
            self._record(Fraction(cost), Fraction(cost))

    @rule(cost=_costs, back=_steps)
    def time_until(self, cost: float, back: float) -> None:
        before = self.bucket.statistics(now=self.now)
        wait = self.bucket.time_until(cost, now=self.now - back)
        exact = self.model.wait(Fraction(cost), Fraction(self.now - back))
        assert (wait == math.inf) if exact is None else (Fraction(wait) == exact)
        assert self.bucket.statistics(now=self.now) == before

    @rule(amount=_costs)
    def charge(self, amount: float) -> None:
        self.bucket.charge(amount, now=self.now)
        self.model.advance(Fraction(self.now))
        applied = min(Fraction(amount), self.model.level + self.model.burst)
        self.model.level -= applied
        self._record(Fraction(0), applied)

    @rule(amount=_costs)
    def refund(self, amount: float) -> None:
        self.bucket.refund(amount, now=self.now)
        self.model.advance(Fraction(self.now))
        applied = min(Fraction(amount), self.model.burst - self.model.level)
        self.model.level += applied
        self._record(-applied, -applied)

    @rule(back=_steps, cost=_costs)
    def stale_now(self, back: float, cost: float) -> None:
        # An earlier now acts as the latest one: no refill, no error.
        now = self.now - (back or 0.125)
        wait = self.bucket.time_until(cost, now=now)
        assert self.bucket.try_acquire(cost, now=now) == (wait == 0.0)
        exact = self.model.wait(Fraction(cost), Fraction(now))
        self.model.advance(Fraction(now))
        assert (wait == math.inf) if exact is None else (Fraction(wait) == exact)
        if wait == 0.0:
            self.model.level -= Fraction(cost)
            self._record(Fraction(cost), Fraction(cost))

    @invariant()
    def matches_the_model(self) -> None:
        stats = self.bucket.statistics(now=self.now)
        assert Fraction(stats.level) == self.model.at(Fraction(self.now))
        assert -stats.burst <= stats.level <= stats.burst
        assert stats.granted - stats.refunded == sum(event[1] for event in self.events)
        assert stats.granted + stats.charged - stats.refunded == sum(e[2] for e in self.events)

    @invariant()
    def invariant_1_in_every_window(self) -> None:
        # Windows ending at the newest event; earlier ones were checked when
        # their last event was newest, so every window is checked once.
        if not self.events:
            return
        rate, burst = self.model.rate, self.model.burst
        end, _, _, level_after = self.events[-1]
        debt = max(Fraction(0), -level_after)
        admitted = total = Fraction(0)
        for start, net, net_with_charges, _ in reversed(self.events):
            admitted += net
            total += net_with_charges
            assert admitted <= rate * (end - start) + burst
            assert total <= rate * (end - start) + burst + debt
            assert debt <= burst


TestBucketMachine = BucketMachine.TestCase
