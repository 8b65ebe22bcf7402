"""A token bucket in cost units, driven by the caller's clock.

The bucket holds up to ``burst`` cost units and refills at ``rate`` cost units
per second. Every method takes ``now`` in monotonic seconds; nothing here reads
a clock. A ``now`` earlier than the latest one passed to ``try_acquire``,
``charge`` or ``refund`` is treated as that latest one: no refill, no error
(callers on different threads can read the clock slightly out of order). A
``now`` that is not a time in monotonic seconds (NaN, an infinity, past
``±1e11``: see :func:`~slopolicy.core.checks.time_problem`) raises
:class:`UsageError` and changes nothing.

Grants and refusals (invariant 1): the bucket never grants more than
``rate * T + burst`` cost units net of refunds in any window of length ``T``.
:meth:`TokenBucket.charge` may push the level below zero (debt, when actual
usage exceeded an estimate), but never below ``-burst``; so counting charges
too, consumption in a window exceeds ``rate * T + burst`` by at most the debt
still owed at its end, which is at most one ``burst``.

The state is a level and the time it was stored at, refilled by
``rate * (now - last)`` and clamped at ``burst``: a fixed handful of floats per
bucket whatever the costs, and no drift to correct, since each operation rounds
once, near the level's magnitude.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slopolicy.core.checks import MAX_AMOUNT, check_now, shown
from slopolicy.errors import UsageError

__all__ = ("BucketStatistics", "TokenBucket")

_INF = math.inf


@dataclass(frozen=True, slots=True)
class BucketStatistics:
    """A snapshot of one bucket. Amounts are in cost units.

    Attributes:
        rate: refill rate (cost units per second).
        burst: capacity (cost units).
        level: cost units available at the snapshot's ``now``; negative is debt.
        granted: sum of the costs granted.
        refused: how many acquisitions were refused.
        charged: cost units taken by :meth:`TokenBucket.charge`, not counting forgiven.
        refunded: cost units given back by :meth:`TokenBucket.refund` (a refund
            past a full bucket is dropped and not counted).
        forgiven: cost units charged beyond the debt floor of ``-burst`` and dropped.
    """

    rate: float
    burst: float
    level: float
    granted: float
    refused: int
    charged: float
    refunded: float
    forgiven: float


def _bad_amount(name: str, value: float) -> UsageError:
    return UsageError(f"{name} must be a finite number >= 0 cost units, not {shown(value)}")


class TokenBucket:
    """Up to ``burst`` cost units, refilled at ``rate`` cost units per second.

    The bucket starts full (or at ``level``, cost units in ``[-burst, burst]``)
    at time ``now`` (monotonic seconds). ``rate`` and ``burst`` must be finite
    and positive. A cost of 0 is always granted, even in debt.
    """

    __slots__ = (
        "_burst",
        "_charged",
        "_forgiven",
        "_granted",
        "_last",
        "_level",
        "_rate",
        "_refunded",
        "_refused",
        "_seen",
    )

    def __init__(
        self, rate: float, burst: float, *, now: float = 0.0, level: float | None = None
    ) -> None:
        if not 0.0 < rate <= MAX_AMOUNT:
            raise UsageError(
                f"rate must be finite and > 0 cost units per second, not {shown(rate)}"
            )
        if not 0.0 < burst <= MAX_AMOUNT:
            raise UsageError(f"burst must be finite and > 0 cost units, not {shown(burst)}")
        check_now(now)
        if level is None:
            level = burst
        elif not -burst <= level <= burst:
            raise UsageError(
                f"level must be within [-burst, burst] = ±{burst!r}, not {shown(level)}"
            )
        self._rate = float(rate)
        self._burst = float(burst)
        # The level is stored as of ``_last``, the time of the last change;
        # ``_seen`` is the latest now passed to a mutating call, which an
        # earlier now is taken to mean. Refusals move only ``_seen``, so the
        # float path from the stored level, and every wait, stays the same.
        self._level = float(level)
        self._last = self._seen = float(now)
        self._granted = 0.0
        self._refused = 0
        self._charged = 0.0
        self._refunded = 0.0
        self._forgiven = 0.0

    def __repr__(self) -> str:
        return (
            f"<TokenBucket rate={self._rate!r} burst={self._burst!r} "
            f"level={self._level!r} at now={self._last!r}>"
        )

    @property
    def rate(self) -> float:
        """Refill rate in cost units per second."""
        return self._rate

    @property
    def burst(self) -> float:
        """Capacity in cost units."""
        return self._burst

    def _level_at(self, now: float) -> float:
        """The level at ``now >= _last``: the same float expression the grant
        in try_acquire uses, so a read and the grant after it agree to the bit."""
        level = self._level + self._rate * (now - self._last)
        return level if level < self._burst else self._burst

    def _effective(self, now: float) -> float:
        """``now`` (checked), or the latest now seen if it is earlier."""
        return now if now > self._seen else self._seen

    def _advance(self, now: float) -> None:
        now = self._effective(now)
        self._level = self._level_at(now)
        self._last = self._seen = now

    def level(self, *, now: float) -> float:
        """Cost units available at ``now``; negative while in debt. A pure read."""
        check_now(now)
        return self._level_checked(now)

    def _level_checked(self, now: float) -> float:
        """:meth:`level` at a checked ``now``."""
        return self._level_at(self._effective(now))

    def time_until(self, cost: float, *, now: float) -> float:
        """Seconds from ``now`` until ``cost`` cost units could be taken: 0.0 if
        they could be now, ``math.inf`` if ``cost > burst`` (never). A pure read.

        The wait is ``(cost - level) / rate``, exact but for float rounding, and
        never short: a :meth:`try_acquire` at ``now + wait`` is granted if
        nothing else happens in between.
        """
        if not 0.0 <= cost <= MAX_AMOUNT:
            raise _bad_amount("cost", cost)
        check_now(now)
        return self._time_until(cost, now)

    def _time_until(self, cost: float, now: float) -> float:
        """:meth:`time_until` of a checked ``cost`` and ``now``."""
        start = self._effective(now)
        if cost <= self._level_at(start) or cost == 0.0:
            return 0.0
        if cost > self._burst:
            return _INF
        return self._wait(cost, now, start)

    def _wait(self, cost: float, now: float, start: float) -> float:
        """Exact wait from ``now`` for ``0 < cost <= burst``, not grantable at ``start``."""
        target = self._first_time(cost, start + (cost - self._level_at(start)) / self._rate)
        wait = target - now
        while now + wait < target:  # only when ``now`` and ``wait`` differ in scale
            wait = math.nextafter(wait, _INF)
        return wait

    def _first_time(self, cost: float, guess: float) -> float:
        """``guess``, or the first float time after it at which the grant succeeds.

        ``guess`` is exact but for rounding, which may leave the grant (the same
        float expression) a hair short; bracket with doubling steps, then bisect.
        """
        level_at = self._level_at
        if level_at(guess) >= cost:
            return guess
        step = math.ulp(guess)
        lo, hi = guess, guess + step
        while level_at(hi) < cost:
            lo, step = hi, step * 2
            hi = lo + step
        while True:
            mid = lo + (hi - lo) / 2
            if not lo < mid < hi:
                return hi
            if level_at(mid) < cost:
                lo = mid
            else:
                hi = mid

    def try_acquire(self, cost: float, *, now: float) -> bool:
        """Take ``cost`` cost units at ``now`` (monotonic seconds): ``True`` when
        granted; otherwise ``False``, taking nothing (:meth:`time_until` says
        how long to wait).
        """
        if not 0.0 <= cost <= MAX_AMOUNT:
            raise _bad_amount("cost", cost)
        check_now(now)
        return self._try_acquire(cost, now) == 0.0

    def _try_acquire(self, cost: float, now: float) -> float:
        """:meth:`try_acquire` of a checked ``cost`` and ``now``: 0.0 when
        granted, else the :meth:`time_until` wait (the tables' refusals carry it)."""
        # Inline _effective and _level_at: this is the hot path of every admission.
        start = self._seen
        if now > start:
            start = self._seen = now
        level = self._level + self._rate * (start - self._last)
        if level > self._burst:
            level = self._burst
        if cost <= level or cost == 0.0:
            self._level = level - cost
            self._last = start
            self._granted += cost
            return 0.0
        self._refused += 1
        if cost > self._burst:
            return _INF
        return self._wait(cost, now, start)

    def charge(self, amount: float, *, now: float) -> None:
        """Take ``amount`` more cost units: actual usage exceeded the estimate.

        The level may go negative (debt, repaid by refill before the next
        grant) but never below ``-burst``; the excess is forgiven and counted
        in :attr:`BucketStatistics.forgiven`.
        """
        if not 0.0 <= amount <= MAX_AMOUNT:
            raise _bad_amount("amount", amount)
        check_now(now)
        self._charge(amount, now)

    def _charge(self, amount: float, now: float) -> None:
        """:meth:`charge` of a checked ``amount`` and ``now``."""
        self._advance(now)
        level = self._level - amount
        floor = -self._burst
        if level < floor:
            self._forgiven += floor - level
            self._charged += self._level - floor
            level = floor
        else:
            self._charged += amount
        self._level = level

    def refund(self, amount: float, *, now: float) -> None:
        """Give back ``amount`` cost units: actual usage was below the estimate.
        The level never rises above ``burst``."""
        if not 0.0 <= amount <= MAX_AMOUNT:
            raise _bad_amount("amount", amount)
        check_now(now)
        self._refund(amount, now)

    def _refund(self, amount: float, now: float) -> None:
        """:meth:`refund` of a checked ``amount`` and ``now``."""
        self._advance(now)
        level = self._level + amount
        if level > self._burst:
            level = self._burst
        self._refunded += level - self._level
        self._level = level

    def statistics(self, *, now: float) -> BucketStatistics:
        """A frozen snapshot at ``now`` (monotonic seconds)."""
        check_now(now)
        return BucketStatistics(
            rate=self._rate,
            burst=self._burst,
            level=self._level_checked(now),
            granted=self._granted,
            refused=self._refused,
            charged=self._charged,
            refunded=self._refunded,
            forgiven=self._forgiven,
        )
