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

from slopolicy.core.checks import shown
from slopolicy.core.tools.limits import ToolLimits, ToolSpec, _check_name
from slopolicy.core.tools.rates import RollingRates
from slopolicy.errors import UsageError

__all__ = ("MAX_RISK_NAMES", "calls_per_tool", "combined", "tool_risk")

#: The most tool names one :meth:`~slopolicy.core.tools.ToolPool.risk` call takes.
MAX_RISK_NAMES = 1024


def calls_per_tool(limits: ToolLimits, tools: object) -> dict[str, int]:
    """The calls ``tools`` names, per configured tool (the spec covering each
    name); raises :class:`UsageError` for anything but at most
    :data:`MAX_RISK_NAMES` names the limits cover."""
    if isinstance(tools, str) or not isinstance(tools, Iterable):
        raise UsageError(f"tools must be an iterable of tool names, not {shown(tools)}")
    calls: dict[str, int] = {}
    for count, tool in enumerate(tools, 1):
        if count > MAX_RISK_NAMES:
            raise UsageError(f"tools must name at most {MAX_RISK_NAMES} calls")
        _check_name("a tool name", tool)
        spec = limits.spec(tool)
        if spec is None:
            raise UsageError(f"no limits cover tool {tool!r}: it has no risk to read")
        calls[spec.name] = calls.get(spec.name, 0) + 1
    return calls


def tool_risk(rates: RollingRates, spec: ToolSpec, limits: ToolLimits, *, now: float) -> float:
    """One tool's risk from its window at ``now``: the larger of its failure
    share and its time share (its ``timeout``, else ``limits.risk_horizon``,
    reading as 1)."""
    calls, timeouts, errors, seconds = rates.totals(now=now)
    horizon = limits.risk_horizon if spec.timeout is None else spec.timeout
    base = max(calls, limits.min_calls)
    return min(1.0, max((timeouts + errors) / base, seconds / base / horizon))


def combined(risks: Iterable[tuple[float, int]]) -> float:
    """``1 - prod((1 - risk) ** times)`` over ``(risk, times)`` pairs, within [0, 1]."""
    safe = math.prod((1.0 - risk) ** times for risk, times in risks)
    return min(1.0, max(0.0, 1.0 - safe))
