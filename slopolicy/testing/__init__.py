"""Helpers for testing policies and the code around them.

- :mod:`slopolicy.testing.strategies`: hypothesis strategies (needs ``slopolicy[testing]``).
- :mod:`slopolicy.testing.fake_engine`: an in-process engine that streams on the anyio clock.
- :mod:`slopolicy.testing.clock`: a manual clock for the sans-IO core.
- :mod:`slopolicy.testing.virtual_loop`: virtual time for asyncio (trio has ``MockClock``).
- :mod:`slopolicy.testing.leaks`: a check that nothing is left held after a run.
- :mod:`slopolicy.testing.load`: a closed-loop load driver for a :class:`~slopolicy.Gate`.

This package imports neither hypothesis nor anyio; ``docs/simulator.md`` has a
recipe for property-testing a custom policy in the simulator.
"""

from __future__ import annotations

from slopolicy.testing.clock import ManualClock as ManualClock
from slopolicy.testing.leaks import assert_no_leaks as assert_no_leaks
from slopolicy.testing.leaks import leaks as leaks

__all__ = ("ManualClock", "assert_no_leaks", "leaks")
