"""Helpers for testing policies and the code around them.

- :mod:`slopolicy.testing.strategies`: hypothesis strategies (needs ``slopolicy[testing]``).
- :mod:`slopolicy.testing.fake_engine`: an in-process engine that streams on the anyio clock.
- :mod:`slopolicy.testing.clock`: virtual time for asyncio (trio has ``MockClock``).
- :mod:`slopolicy.testing.load`: a closed-loop load driver for a :class:`~slopolicy.Gate`.
"""

from __future__ import annotations
