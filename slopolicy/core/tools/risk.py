"""A request's ``tool_risk`` from what its tools have cost lately.

``tool_risk`` (0-1) is the cost estimator's gamma term: how likely and how
costly the tool or retrieval calls a request leads to are. From the pool's
rolling window (``ToolLimits.window``), one tool's risk is the larger of

* its **failure share**: timed-out and failed calls over
  ``max(calls, min_calls)``, the rate the ladder reads; and
* its **time share**: seconds run per call (over the same
  ``max(calls, min_calls)``) as a share of its ``timeout`` (or of
  ``ToolLimits.risk_horizon`` when it has none), at most 1,

so a tool that times out every call, or runs as long as it may, reads 1, and
one idle or quick and reliable reads near 0. Several calls combine as the
chance that at least one goes bad were they independent,
``1 - prod(1 - risk)``, so the result stays within [0, 1] and never falls
when a call is added.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ("MAX_RISK_NAMES", "combined", "one_tool")

#: The most tool names one :meth:`~slopolicy.core.tools.ToolPool.risk` call takes.
MAX_RISK_NAMES = 1024


def one_tool(calls: int, failed: int, seconds: float, *, min_calls: int, horizon: float) -> float:
    """One tool's risk from its window's ``calls``, ``failed`` calls (timeouts
    and errors) and ``seconds`` run; ``horizon`` is the seconds that read as 1."""
    base = max(calls, min_calls)
    return min(1.0, max(failed / base, seconds / base / horizon))


def combined(risks: Iterable[tuple[float, int]]) -> float:
    """``1 - prod((1 - risk) ** times)`` over ``(risk, times)`` pairs, within [0, 1]."""
    safe = math.prod((1.0 - risk) ** times for risk, times in risks)
    return min(1.0, max(0.0, 1.0 - safe))
