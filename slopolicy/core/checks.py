"""Argument checks the sans-IO core shares: one wording for one mistake."""

from __future__ import annotations

import math

from slopolicy.errors import UsageError

__all__ = ("check_now", "is_number")


def is_number(value: object) -> bool:
    """Whether ``value`` is a finite int or float (``bool`` is not a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_now(now: object) -> None:
    """Raise :class:`UsageError` unless ``now`` is a finite number of monotonic seconds."""
    if not is_number(now):
        raise UsageError(f"now must be a finite number of monotonic seconds, got {now!r}")
