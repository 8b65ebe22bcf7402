"""Cost before the stream starts: token counters, bounded-time sampling, the cost score.

A thin face: the public names of this wing, re-exported from its modules.
"""

from __future__ import annotations

from slopolicy.core.cost.estimator import CostEstimate as CostEstimate
from slopolicy.core.cost.estimator import CostEstimator as CostEstimator
from slopolicy.core.cost.estimator import CostWeights as CostWeights
from slopolicy.core.cost.estimator import TokenEstimate as TokenEstimate
from slopolicy.core.cost.tokens import CallableCounter as CallableCounter
from slopolicy.core.cost.tokens import HeuristicCounter as HeuristicCounter
from slopolicy.core.cost.tokens import TiktokenCounter as TiktokenCounter
from slopolicy.core.cost.tokens import TokenCounter as TokenCounter
from slopolicy.core.cost.tokens import TokenizerFallbackWarning as TokenizerFallbackWarning
from slopolicy.core.cost.tokens import load_counter as load_counter

__all__ = (
    "CallableCounter",
    "CostEstimate",
    "CostEstimator",
    "CostWeights",
    "HeuristicCounter",
    "TiktokenCounter",
    "TokenCounter",
    "TokenEstimate",
    "TokenizerFallbackWarning",
    "load_counter",
)
