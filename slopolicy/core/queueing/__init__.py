"""Who goes next: fair queues per lane, the lane scheduler, deadlines, dispatch
pacing, and the engine TTFT model with its prefill budget.

A thin face: the public names of this wing, re-exported from its modules.
"""

from __future__ import annotations

from slopolicy.core.queueing.fairqueue import FairQueue as FairQueue
from slopolicy.core.queueing.fairqueue import FairQueueStatistics as FairQueueStatistics
from slopolicy.core.queueing.pacing import DispatchPace as DispatchPace
from slopolicy.core.queueing.scheduler import LaneScheduler as LaneScheduler

__all__ = (
    "DispatchPace",
    "FairQueue",
    "FairQueueStatistics",
    "LaneScheduler",
)
