"""SLO targets and tracking: sliding windows, quantile sketches, burn rates, latency budgets.

A thin face: the public names of this wing, re-exported from its modules.
"""

from __future__ import annotations

from slopolicy.core.slo.budget import Breakdown as Breakdown
from slopolicy.core.slo.budget import LatencyBudget as LatencyBudget
from slopolicy.core.slo.budget import StageShare as StageShare
from slopolicy.core.slo.burn import DEFAULT_BURN_RULES as DEFAULT_BURN_RULES
from slopolicy.core.slo.burn import Alert as Alert
from slopolicy.core.slo.burn import AlertSeverity as AlertSeverity
from slopolicy.core.slo.burn import BurnRate as BurnRate
from slopolicy.core.slo.burn import BurnRule as BurnRule
from slopolicy.core.slo.gaps import GapWindow as GapWindow
from slopolicy.core.slo.quantiles import QuantileSketch as QuantileSketch
from slopolicy.core.slo.sketches import SlidingQuantiles as SlidingQuantiles
from slopolicy.core.slo.snapshot import SLOSnapshot as SLOSnapshot
from slopolicy.core.slo.targets import STALL_S as STALL_S
from slopolicy.core.slo.targets import Objective as Objective
from slopolicy.core.slo.targets import SLOTargets as SLOTargets
from slopolicy.core.slo.targets import Summary as Summary
from slopolicy.core.slo.targets import tbt_met as tbt_met
from slopolicy.core.slo.tracker import CostModel as CostModel
from slopolicy.core.slo.tracker import SLOTracker as SLOTracker
from slopolicy.core.slo.tracker_set import TrackerSet as TrackerSet

__all__ = (
    "DEFAULT_BURN_RULES",
    "STALL_S",
    "Alert",
    "AlertSeverity",
    "Breakdown",
    "BurnRate",
    "BurnRule",
    "CostModel",
    "GapWindow",
    "LatencyBudget",
    "Objective",
    "QuantileSketch",
    "SLOSnapshot",
    "SLOTargets",
    "SLOTracker",
    "SlidingQuantiles",
    "StageShare",
    "Summary",
    "TrackerSet",
    "tbt_met",
)
