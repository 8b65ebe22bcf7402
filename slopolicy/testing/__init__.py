"""Helpers for testing policies: hypothesis strategies (needs ``slopolicy[testing]``),
a manual clock, and a leak check.

Strategies live in :mod:`slopolicy.testing.strategies`, which imports
hypothesis; this package itself does not, so the clock and the leak check
work without it. ``docs/simulator.md`` has a recipe for property-testing a
custom policy in the simulator.
"""

from __future__ import annotations

from slopolicy.testing.clock import ManualClock as ManualClock
from slopolicy.testing.leaks import assert_no_leaks as assert_no_leaks
from slopolicy.testing.leaks import leaks as leaks

__all__ = ("ManualClock", "assert_no_leaks", "leaks")
