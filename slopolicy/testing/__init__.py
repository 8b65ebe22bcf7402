"""Helpers for testing policies: hypothesis strategies (needs ``slopolicy[testing]``).

Import strategies from :mod:`slopolicy.testing.strategies`.
"""

from __future__ import annotations
