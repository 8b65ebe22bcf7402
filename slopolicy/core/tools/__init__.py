"""Tool and retriever calls: caps, rate limits, fair waiting and timeout rates.

A thin face: the public names of this wing, re-exported from its modules.
"""

from __future__ import annotations

from slopolicy.core.tools.calls import ToolDisplaced as ToolDisplaced
from slopolicy.core.tools.calls import ToolLease as ToolLease
from slopolicy.core.tools.calls import ToolOutcome as ToolOutcome
from slopolicy.core.tools.calls import ToolPoolStatistics as ToolPoolStatistics
from slopolicy.core.tools.calls import ToolRefused as ToolRefused
from slopolicy.core.tools.calls import ToolStatistics as ToolStatistics
from slopolicy.core.tools.calls import ToolWaiting as ToolWaiting
from slopolicy.core.tools.limits import ANY_TOOL as ANY_TOOL
from slopolicy.core.tools.limits import ToolLimits as ToolLimits
from slopolicy.core.tools.limits import ToolSpec as ToolSpec
from slopolicy.core.tools.pool import ToolPool as ToolPool

__all__ = (
    "ANY_TOOL",
    "ToolDisplaced",
    "ToolLease",
    "ToolLimits",
    "ToolOutcome",
    "ToolPool",
    "ToolPoolStatistics",
    "ToolRefused",
    "ToolSpec",
    "ToolStatistics",
    "ToolWaiting",
)
