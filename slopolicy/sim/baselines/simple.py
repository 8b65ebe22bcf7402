"""The baselines without a queue of their own: FCFS, static lane priority, a
per-tenant requests-per-minute limit.

- ``fcfs``: no admission control. Every request goes straight to the engine's
  FCFS queue (vLLM's default).
- ``priority``: static lane priority. The engine's queue is ordered by lane,
  then arrival, and the lowest priority is preempted first (vLLM
  ``--scheduling-policy priority``).
- ``rpm``: a per-tenant requests-per-minute limit (LiteLLM style: fixed
  one-minute windows, 429 above the limit), then FCFS.
"""

from __future__ import annotations

import math

from slopolicy.config import PolicyConfig
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.routing import LaneRouter
from slopolicy.core.slo.targets import SLOTargets
from slopolicy.errors import UsageError
from slopolicy.sim.engine import Scheduling
from slopolicy.sim.interface import EngineView, Release, Released, SimAdmission
from slopolicy.sim.workload import SimRequest

__all__ = ("FCFS", "RPM", "LanePriority", "Lanes", "lane_of")


class FCFS:
    """Everything to the engine at once, in arrival order."""

    name = "fcfs"
    scheduling: Scheduling = "fcfs"

    def __init__(self) -> None:
        self._pending: list[Release] = []

    def _priority(self, request: SimRequest) -> int:
        return 0

    def submit(self, request: SimRequest, *, now: float) -> SimAdmission:
        self._pending.append(Release(request.id, request.max_new_tokens, self._priority(request)))
        return SimAdmission(True)

    def dispatch(self, now: float, engine: EngineView) -> Released:
        started, self._pending = tuple(self._pending), []
        return Released(started)

    def first_token(self, request_id: str, *, now: float) -> None:
        pass

    def tokens(self, request_id: str, count: int, *, now: float) -> None:
        pass

    def finish(self, request_id: str, *, now: float, output_tokens: int) -> None:
        pass

    def wakeup(self) -> float | None:
        return None

    def observe(self, engine: EngineView, now: float) -> None:
        pass


def lane_of(router: LaneRouter, request: SimRequest) -> str:
    """The lane ``router`` would route ``request`` to; when routing refuses
    it, its hint if the router has that lane, else where its size routes it
    (a hint naming a lane the config lacks is dropped), else the first lane."""
    from slopolicy.core.request import Request

    names = [lane.name for lane in router.lanes]
    hint = request.lane if request.lane in names else None
    decision = router.route(
        Request(
            id=request.id,
            tenant=request.tenant,
            prompt_tokens=request.prompt_tokens,
            max_new_tokens=request.max_new_tokens,
            lane=hint,
            tier=request.tier,
        )
    )
    if decision.lane is not None:
        return decision.lane
    return hint or names[0]


class Lanes:
    """What a baseline knows of a policy config's lanes: where a request
    routes (:func:`lane_of`), each lane's rank (0: the most interactive), SLO
    targets and fair-share weight."""

    def __init__(self, config: PolicyConfig) -> None:
        self.router = config.build_router(config.build_estimator(HeuristicCounter()))
        self.targets: dict[str, SLOTargets] = {
            lane.name: lane.slo.to_targets() for lane in config.lanes
        }
        self.weights: dict[str, float] = {lane.name: lane.weight for lane in config.lanes}

    def lane(self, request: SimRequest) -> str:
        """The lane ``request`` routes to."""
        return lane_of(self.router, request)

    def rank(self, lane: str) -> int:
        """``lane``'s rank: 0 is the most interactive."""
        return self.router.rank(lane)


class LanePriority(FCFS):
    """FCFS with the engine's queue ordered by lane: the lane a request routes
    to under ``config`` is its priority (the most interactive lane first)."""

    name = "priority"
    scheduling: Scheduling = "priority"

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        self._lanes = Lanes(config)

    def _priority(self, request: SimRequest) -> int:
        return self._lanes.rank(self._lanes.lane(request))


class RPM(FCFS):
    """At most ``limit`` requests per tenant per clock minute (fixed windows
    starting at 0 s); the rest are refused with ``rate_limited``."""

    name = "rpm"

    def __init__(self, limit: int = 60) -> None:
        super().__init__()
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UsageError(f"the rpm limit must be an int >= 1, got {limit!r}")
        self.limit = limit
        self._windows: dict[str, tuple[int, int]] = {}

    def submit(self, request: SimRequest, *, now: float) -> SimAdmission:
        window = math.floor(now / 60.0)
        seen, count = self._windows.get(request.tenant, (window, 0))
        if seen != window:
            count = 0
        if count >= self.limit:
            # LiteLLM answers 429 with a Retry-After of the time left in the window.
            return SimAdmission(False, None, "rate_limited", True, (window + 1) * 60.0 - now)
        self._windows[request.tenant] = (window, count + 1)
        return super().submit(request, now=now)
