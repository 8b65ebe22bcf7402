"""What people run today, on the same engine model as ours.

- ``fcfs``: no admission control. Every request goes straight to the engine's
  FCFS queue (vLLM's default).
- ``priority``: static lane priority. The engine's queue is ordered by lane,
  then arrival, and the lowest priority is preempted first (vLLM
  ``--scheduling-policy priority``).
- ``vtc``: Virtual Token Counter fairness alone (Sheng et al., OSDI 2024).
  Requests wait in a per-tenant fair queue and start, smallest counter first,
  when the engine has a seat and KV for them; counters charge ``w_p·prompt``
  at start and ``w_q`` per output token. No lanes, ladder or quotas.
- ``rpm``: a per-tenant requests-per-minute limit (LiteLLM style: fixed
  one-minute windows, 429 above the limit), then FCFS.

The VTC baseline uses the core's :class:`~slopolicy.core.queueing.fairqueue.FairQueue`
(the same counters our policy uses inside a lane).
"""

from __future__ import annotations

import math

from slopolicy.config import PolicyConfig
from slopolicy.core.checks import MAX_COUNT
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.queueing.fairqueue import FairQueue
from slopolicy.core.router import LaneRouter
from slopolicy.errors import UsageError
from slopolicy.sim.engine import Scheduling
from slopolicy.sim.scheduler import Admission, EngineView, Release, Released
from slopolicy.sim.workload import SimRequest

__all__ = ("BASELINES", "FCFS", "RPM", "VTC", "LanePriority", "lane_of")


class FCFS:
    """Everything to the engine at once, in arrival order."""

    name = "fcfs"
    scheduling: Scheduling = "fcfs"

    def __init__(self) -> None:
        self._pending: list[Release] = []

    def _priority(self, request: SimRequest) -> int:
        return 0

    def submit(self, request: SimRequest, now: float) -> Admission:
        self._pending.append(Release(request.id, request.max_new_tokens, self._priority(request)))
        return Admission(True)

    def dispatch(self, now: float, engine: EngineView) -> Released:
        started, self._pending = tuple(self._pending), []
        return Released(started)

    def first_token(self, request_id: str, now: float) -> None:
        pass

    def tokens(self, request_id: str, count: int, now: float) -> None:
        pass

    def finish(self, request_id: str, now: float, output_tokens: int) -> None:
        pass

    def wakeup(self) -> float | None:
        return None

    def observe(self, engine: EngineView, now: float) -> None:
        pass


def lane_of(router: LaneRouter, request: SimRequest) -> str:
    """The lane ``router`` would route ``request`` to (its hint, or the first
    lane, when routing refuses it)."""
    from slopolicy.core.request import Request

    decision = router.route(
        Request(
            id=request.id,
            tenant=request.tenant,
            prompt_tokens=request.prompt_tokens,
            max_new_tokens=request.max_new_tokens,
            lane=request.lane,
            tier=request.tier,
        )
    )
    if decision.lane is not None:
        return decision.lane
    return request.lane or router.lanes[0].name


class LanePriority(FCFS):
    """FCFS with the engine's queue ordered by lane: the lane a request routes
    to under ``config`` is its priority (the most interactive lane first)."""

    name = "priority"
    scheduling: Scheduling = "priority"

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        self._router = config.build_router(config.build_estimator(HeuristicCounter()))

    def _priority(self, request: SimRequest) -> int:
        return self._router.rank(lane_of(self._router, request))


class VTC(FCFS):
    """Virtual Token Counters across tenants (weights 1), holding requests
    until the engine can start them. ``prompt_weight``/``output_weight`` are
    the paper's ``w_p``/``w_q``."""

    name = "vtc"

    def __init__(self, *, prompt_weight: float = 1.0, output_weight: float = 2.0) -> None:
        super().__init__()
        self._queue: FairQueue[SimRequest] = FairQueue(MAX_COUNT)  # unbounded
        self._tenants: dict[str, str] = {}
        self._prompt_weight = prompt_weight
        self._output_weight = output_weight

    def submit(self, request: SimRequest, now: float) -> Admission:
        self._queue.push(request, request.tenant, 1.0)
        self._tenants[request.id] = request.tenant
        return Admission(True)

    def dispatch(self, now: float, engine: EngineView) -> Released:
        started: list[Release] = []
        while (head := self._queue.peek()) is not None and engine.admissible(head.prompt_tokens):
            self._queue.pop()
            self._queue.charge(head.tenant, self._prompt_weight * head.prompt_tokens)
            started.append(Release(head.id, head.max_new_tokens))
        return Released(tuple(started))

    def tokens(self, request_id: str, count: int, now: float) -> None:
        self._queue.charge(self._tenants[request_id], self._output_weight * count)

    def finish(self, request_id: str, now: float, output_tokens: int) -> None:
        del self._tenants[request_id]


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

    def submit(self, request: SimRequest, now: float) -> Admission:
        window = math.floor(now / 60.0)
        seen, count = self._windows.get(request.tenant, (window, 0))
        if seen != window:
            count = 0
        if count >= self.limit:
            # LiteLLM answers 429 with a Retry-After of the time left in the window.
            return Admission(False, None, "rate_limited", True, (window + 1) * 60.0 - now)
        self._windows[request.tenant] = (window, count + 1)
        return super().submit(request, now)


#: The baseline names, in the order reports list them.
BASELINES = ("fcfs", "priority", "vtc", "rpm")
