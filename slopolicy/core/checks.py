"""Argument checks the sans-IO core shares: one rule and one wording for one mistake.

Two kinds of number reach the core from outside, and each has one check here:

* a **time** on the caller's monotonic clock (every ``now``, a request's
  ``deadline``, a signal's ``observed_at``): :func:`time_problem`, and
  :func:`check_now` for ``now`` itself;
* a **count** of tokens or sequences: :func:`count_problem` and
  :func:`check_count`.

Each ``*_problem`` function says what is wrong (``None`` when nothing is), so
a caller that must not raise (the runtime, reading an engine's usage) can
record the problem instead; each ``check_*`` raises :class:`UsageError`.
"""

from __future__ import annotations

import math
import sys

from slopolicy.errors import UsageError

__all__ = (
    "MAX_AMOUNT",
    "MAX_COUNT",
    "MAX_NOW",
    "check_count",
    "check_now",
    "count_problem",
    "is_number",
    "shown",
    "time_problem",
)

#: The largest magnitude of a time the core takes, in seconds (about 3,170
#: years). No monotonic clock in seconds gets near it, while the usual unit
#: mistakes are far past it: milliseconds since the epoch are about 1.7e12,
#: microseconds 1.7e15, ``time.time_ns()`` 1.7e18. Below it a float still
#: resolves 2**-16 s (15 µs), well under a millisecond, so ``now + wait`` moves
#: for every wait the policy computes; at 1.7e18 a float's step is 256 s and a
#: queue wait added to ``now`` vanishes. Wall-clock seconds (``time.time()``,
#: about 1.7e9) are within it.
MAX_NOW = 1e11

#: The largest count (tokens, sequences) the core takes: every integer up to
#: 2**53 is exact as a float, so a cost computed from counts neither rounds a
#: count nor overflows (the largest product of two counts is about 1e32).
MAX_COUNT = 2**53

#: The largest amount (cost units) the core takes: the largest finite float.
#: ``0.0 <= x <= MAX_AMOUNT`` refuses NaN, infinities and an int too large to
#: become a float in one chained comparison.
MAX_AMOUNT = sys.float_info.max

# Plain ints and floats take the fast path; subclasses (numpy.float64) the full one.
_PLAIN = (int, float)
_SHOWN_CHARS = 60


def is_number(value: object) -> bool:
    """Whether ``value`` is a finite int or float (``bool`` is not a number here).
    Any int is finite, however large (it is never converted to a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


def shown(value: object) -> str:
    """``repr(value)`` for an error message, bounded: an int of thousands of
    digits (whose ``repr`` may even raise) or a megabyte string is summarized."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not replace the real error
        return f"a {type(value).__name__}"
    return text if len(text) <= _SHOWN_CHARS else f"{text[: _SHOWN_CHARS - 3]}..."


def time_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a time in monotonic seconds, or ``None``.

    A time is an int or float (not ``bool``) within ``±MAX_NOW``; a finite
    number past the bound is named as the unit mistake it almost surely is.
    """
    if not is_number(value):
        return f"a finite number of monotonic seconds, got {shown(value)}"
    assert isinstance(value, (int, float))
    if -MAX_NOW <= value <= MAX_NOW:
        return None
    return (
        f"monotonic seconds within ±{MAX_NOW:.0e} (about 3,170 years), got {shown(value)}: "
        "that is a clock in milliseconds, microseconds or nanoseconds "
        "(time.time_ns(), time.monotonic_ns()); pass seconds"
    )


def check_now(now: object) -> None:
    """Raise :class:`UsageError` unless ``now`` is a time in monotonic seconds
    (see :func:`time_problem`). The one check of ``now`` for every core entry point."""
    # One chained comparison refuses NaN, infinities and anything past the
    # bound (an int of any size compares exactly); the class test refuses bool.
    try:
        if now.__class__ in _PLAIN and -MAX_NOW <= now <= MAX_NOW:
            return
    except TypeError:  # not comparable with a float: not a number
        pass
    check_time("now", now)


def check_time(name: str, value: object) -> None:
    """Raise :class:`UsageError` unless ``value``, named ``name``, is a time
    in monotonic seconds (see :func:`time_problem`)."""
    problem = time_problem(value)
    if problem is not None:
        raise UsageError(f"{name} must be {problem}")


def count_problem(value: object, minimum: int = 0) -> str | None:
    """What is wrong with ``value`` as a count (an int, not ``bool``, in
    ``[minimum, MAX_COUNT]``), or ``None``."""
    # bool is an int subclass; True as a token count is a bug, not a 1.
    if isinstance(value, bool) or not isinstance(value, int):
        return f"an integer, got {shown(value)}"
    if not minimum <= value <= MAX_COUNT:
        return f">= {minimum} and <= 2**53, got {shown(value)}"
    return None


def check_count(name: str, value: object, *, minimum: int = 0) -> None:
    """Raise :class:`UsageError` unless ``value`` is a count (see :func:`count_problem`)."""
    if value.__class__ is int and minimum <= value <= MAX_COUNT:
        return
    problem = count_problem(value, minimum)
    if problem is not None:
        raise UsageError(f"{name} must be {problem}")
