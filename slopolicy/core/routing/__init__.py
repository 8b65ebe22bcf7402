"""Lane routing: the router that walks a request down the lanes, and the custom rules it runs.

A thin face: the public names of this wing, re-exported from its modules.
"""

from __future__ import annotations

from slopolicy.core.routing.router import LaneRouter as LaneRouter
from slopolicy.core.routing.rules import RouteContext as RouteContext
from slopolicy.core.routing.rules import RoutingRule as RoutingRule
from slopolicy.core.routing.rules import Verdict as Verdict
from slopolicy.core.routing.rules import VerdictKind as VerdictKind

__all__ = ("LaneRouter", "RouteContext", "RoutingRule", "Verdict", "VerdictKind")
