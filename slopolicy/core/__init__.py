"""The sans-IO core: synchronous objects that take time as ``now`` and never do I/O.

Only the standard library and tiktoken are imported here, so the simulator,
the async gate and the Redis backend can all drive the same objects.
"""

from __future__ import annotations

from slopolicy.core.decisions import Admit as Admit
from slopolicy.core.decisions import Decision as Decision
from slopolicy.core.decisions import Defer as Defer
from slopolicy.core.decisions import Demote as Demote
from slopolicy.core.decisions import Reason as Reason
from slopolicy.core.decisions import Reject as Reject
from slopolicy.core.decisions import Step as Step
from slopolicy.core.estimator import CostEstimate as CostEstimate
from slopolicy.core.estimator import CostEstimator as CostEstimator
from slopolicy.core.estimator import CostWeights as CostWeights
from slopolicy.core.estimator import TokenEstimate as TokenEstimate
from slopolicy.core.request import Message as Message
from slopolicy.core.request import Request as Request
from slopolicy.core.router import LaneRouter as LaneRouter
from slopolicy.core.router import RouteContext as RouteContext
from slopolicy.core.router import RoutingRule as RoutingRule
from slopolicy.core.router import Verdict as Verdict
from slopolicy.core.specs import LaneQuotaSpec as LaneQuotaSpec
from slopolicy.core.specs import LaneSpec as LaneSpec
from slopolicy.core.specs import OverBudget as OverBudget
from slopolicy.core.specs import TierSpec as TierSpec
from slopolicy.core.specs import TierTable as TierTable
from slopolicy.core.tokens import CallableCounter as CallableCounter
from slopolicy.core.tokens import HeuristicCounter as HeuristicCounter
from slopolicy.core.tokens import TiktokenCounter as TiktokenCounter
from slopolicy.core.tokens import TokenCounter as TokenCounter
from slopolicy.core.tokens import TokenizerFallbackWarning as TokenizerFallbackWarning
from slopolicy.core.tokens import load_counter as load_counter

__all__ = (
    "Admit",
    "CallableCounter",
    "CostEstimate",
    "CostEstimator",
    "CostWeights",
    "Decision",
    "Defer",
    "Demote",
    "HeuristicCounter",
    "LaneQuotaSpec",
    "LaneRouter",
    "LaneSpec",
    "Message",
    "OverBudget",
    "Reason",
    "Reject",
    "Request",
    "RouteContext",
    "RoutingRule",
    "Step",
    "TierSpec",
    "TierTable",
    "TiktokenCounter",
    "TokenCounter",
    "TokenEstimate",
    "TokenizerFallbackWarning",
    "Verdict",
    "load_counter",
)
