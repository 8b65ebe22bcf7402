"""Virtual counters: the charge rule every fair queue and lane counter
follows, and the checks of its weights and costs (cost units; counters are
cost units per unit of weight)."""

from __future__ import annotations

import math

from slopolicy.core.checks import MAX_AMOUNT, is_number, shown
from slopolicy.errors import UsageError

__all__ = (
    "MIN_WINDOW_S",
    "charged",
    "check_cost",
    "check_finite",
    "check_slack",
    "check_weight",
    "check_window",
)


def check_weight(weight: float, what: str = "weight") -> None:
    """Raise :class:`UsageError` unless ``weight`` is a finite number > 0."""
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise UsageError(f"{what} must be a number, got {shown(weight)}")
    if not 0 < weight <= MAX_AMOUNT:  # also refuses NaN and an int too large for a float
        raise UsageError(f"{what} must be finite and > 0, got {shown(weight)}")


#: The shortest share window (seconds): its twentieth is the refresh tick,
#: and below a millisecond ``now`` over it leaves the floats.
MIN_WINDOW_S = 1e-3


def check_window(window_s: float) -> None:
    """Raise :class:`UsageError` unless ``window_s`` is a finite number of
    seconds of at least :data:`MIN_WINDOW_S`."""
    check_weight(window_s, "window_s")
    if window_s < MIN_WINDOW_S:
        raise UsageError(f"window_s must be at least {MIN_WINDOW_S} s, got {shown(window_s)}")


def check_cost(cost: float) -> None:
    """Raise :class:`UsageError` unless ``cost`` is a finite number."""
    check_finite(cost, "cost")


def check_finite(value: float, what: str) -> None:
    """Raise :class:`UsageError` unless ``value`` is a finite number (an int
    too large for a float is not)."""
    if not (is_number(value) and -MAX_AMOUNT <= value <= MAX_AMOUNT):
        raise UsageError(f"{what} must be a finite number, got {shown(value)}")


def check_slack(slack: float, what: str = "slack") -> None:
    """Raise :class:`UsageError` unless ``slack`` is a finite number >= 0."""
    check_finite(slack, what)
    if slack < 0:
        raise UsageError(f"{what} must be >= 0, got {shown(slack)}")


def charged(counter: float, cost: float, weight: float, floor: float) -> float:
    """``counter + cost / weight``; a refund stops at ``min(counter, floor)``.

    Raises :class:`UsageError` if the result overflows.
    """
    new = counter + cost / weight
    if cost < 0:
        new = max(new, min(counter, floor))
    if not math.isfinite(new):
        raise UsageError(f"charging {cost!r} at weight {weight!r} overflows the counter")
    return new
