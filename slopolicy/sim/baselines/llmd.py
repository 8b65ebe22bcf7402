"""``llm-d``: the llm-d router's flow control (llm-d/llm-d-router, ``pkg/epp/flowcontrol``).

Requests wait in the gateway, not in the engine, and leave it one dispatch at
a time while the engine is not saturated:

- **priority bands**: a request's band is the rank of the lane the policy
  config routes it to; the highest band with anything queued goes first
  (strict priority).
- **fairness** inside a band, between flows (one per tenant): least attained
  service, a flow's service counted in tokens, ``prompt + 2·output``, charged
  when its request completes; ties go to the flow seen first.
- **ordering** inside a flow: ``slo-deadline``, earliest deadline first on
  ``arrival + the lane's TTFT target`` (lanes without one after, FCFS).
- **saturation gating**: before each dispatch, saturation =
  ``max(waiting / queue_depth_threshold, kv_usage / kv_threshold)``
  (defaults 5 and 0.8) from the engine's metrics, and nothing leaves while it
  is at least 1. ``waiting`` counts what this dispatch already released. The
  real detector counts an endpoint whose metrics are stale as saturated; the
  simulator's metrics are always fresh, so that rule never fires here.
- **TTL**: a request still queued ``ttl`` seconds after it arrived is evicted
  (expired; llm-d's default 60 s, ``ttl="ttft"`` for each lane's TTFT target,
  60 s where a lane has none).
- **capacity**: a band holding ``band_capacity`` requests (default 5,000)
  refuses more with 429 (retryable).

The router's state is per replica; one replica is modelled.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import Literal

from slopolicy.config import PolicyConfig
from slopolicy.errors import UsageError
from slopolicy.sim.baselines.simple import FCFS, Lanes
from slopolicy.sim.interface import EngineView, Release, Released, SimAdmission
from slopolicy.sim.workload import SimRequest

__all__ = ("LlmdFlowControl",)

#: llm-d's default request TTL, seconds.
DEFAULT_TTL_S = 60.0


@dataclass(slots=True)
class _Flow:
    """One tenant's queue in one band: ``(deadline, order, request)`` heap."""

    order: int
    attained: float = 0.0
    heap: list[tuple[float, int, SimRequest]] = field(default_factory=list)


class LlmdFlowControl(FCFS):
    """llm-d flow control in front of the engine; see the module docstring.

    Args:
        config: the policy config whose lanes give bands and TTFT targets.
        ttl: seconds a request may wait, or ``"ttft"`` for its lane's TTFT target.
        queue_depth_threshold: engine queue length that counts as saturated.
        kv_threshold: KV usage (0-1) that counts as saturated.
        band_capacity: requests a band holds before refusing.
        name: the name in reports.
    """

    def __init__(
        self,
        config: PolicyConfig,
        *,
        ttl: float | Literal["ttft"] = DEFAULT_TTL_S,
        queue_depth_threshold: float = 5.0,
        kv_threshold: float = 0.8,
        band_capacity: int = 5000,
        name: str = "llm-d",
    ) -> None:
        super().__init__()
        seconds = isinstance(ttl, int | float) and not isinstance(ttl, bool)
        if ttl != "ttft" and not (seconds and math.isfinite(ttl) and ttl > 0):
            raise UsageError(f"ttl must be seconds > 0 or 'ttft', got {ttl!r}")
        if not (queue_depth_threshold > 0 and 0 < kv_threshold <= 1 and band_capacity >= 1):
            raise UsageError("thresholds must be > 0 (kv_threshold at most 1), capacity >= 1")
        self.name = name
        self._lanes = Lanes(config)
        self._ttl = {lane: self._lane_ttl(ttl, lane) for lane in self._lanes.targets}
        self._depth = queue_depth_threshold
        self._kv = kv_threshold
        self._capacity = band_capacity
        self._bands: dict[int, dict[str, _Flow]] = {}
        self._queued: dict[int, int] = {}  # requests queued per band
        self._expiry: list[tuple[float, int, str]] = []  # (expires at, order, id)
        self._waiting: dict[str, tuple[int, str, int]] = {}  # queued id -> (band, tenant, order)
        self._running: dict[str, tuple[int, str, int]] = {}  # id -> (band, tenant, prompt)
        self._order = itertools.count()

    def _lane_ttl(self, ttl: float | Literal["ttft"], lane: str) -> float:
        if ttl != "ttft":
            return float(ttl)
        target = self._lanes.targets[lane].ttft_target
        return DEFAULT_TTL_S if target is None else target

    def submit(self, request: SimRequest, *, now: float) -> SimAdmission:
        lane = self._lanes.lane(request)
        band = self._lanes.rank(lane)
        if self._queued.get(band, 0) >= self._capacity:
            return SimAdmission(False, lane, "queue_full", True)
        flows = self._bands.setdefault(band, {})
        flow = flows.get(request.tenant)
        if flow is None:
            flow = flows[request.tenant] = _Flow(len(flows))
        target = self._lanes.targets[lane].ttft_target
        deadline = math.inf if target is None else request.arrival + target
        order = next(self._order)
        heapq.heappush(flow.heap, (deadline, order, request))
        heapq.heappush(self._expiry, (now + self._ttl[lane], order, request.id))
        self._waiting[request.id] = (band, request.tenant, order)
        self._queued[band] = self._queued.get(band, 0) + 1
        return SimAdmission(True, lane)

    def saturation(self, engine: EngineView) -> float:
        """``max(waiting / queue_depth_threshold, kv_usage / kv_threshold)``."""
        return max(engine.waiting / self._depth, engine.kv_usage() / self._kv)

    def dispatch(self, now: float, engine: EngineView) -> Released:
        expired = self._expire(now)
        started: list[Release] = []
        while self._waiting and self.saturation(engine) < 1.0:
            request, band = self._pick()
            engine.release(request.prompt_tokens)
            self._running[request.id] = (band, request.tenant, request.prompt_tokens)
            started.append(Release(request.id, request.max_new_tokens))
        return Released(tuple(started), expired)

    def _pick(self) -> tuple[SimRequest, int]:
        """Pop the next request: the highest band, its least-served flow, that flow's EDF head."""
        band = min(b for b, count in self._queued.items() if count)
        flows = self._bands[band]
        flow = min(
            (f for f in flows.values() if self._head(f)), key=lambda f: (f.attained, f.order)
        )
        _, _, request = heapq.heappop(flow.heap)
        del self._waiting[request.id]
        self._queued[band] -= 1
        return request, band

    def _head(self, flow: _Flow) -> bool:
        """Whether ``flow`` has a live request (evicted ones leave lazily)."""
        heap = flow.heap
        while heap and heap[0][2].id not in self._waiting:
            heapq.heappop(heap)
        return bool(heap)

    def _expire(self, now: float) -> tuple[str, ...]:
        gone: list[str] = []
        expiry = self._expiry
        while expiry and expiry[0][0] <= now:
            _, order, request_id = heapq.heappop(expiry)
            entry = self._waiting.get(request_id)
            if entry is None or entry[2] != order:
                continue  # already dispatched
            del self._waiting[request_id]
            self._queued[entry[0]] -= 1
            gone.append(request_id)
        return tuple(gone)

    def finish(self, request_id: str, *, now: float, output_tokens: int) -> None:
        band, tenant, prompt = self._running.pop(request_id)
        self._bands[band][tenant].attained += prompt + 2 * output_tokens

    def wakeup(self) -> float | None:
        expiry = self._expiry
        while expiry and expiry[0][2] not in self._waiting:
            heapq.heappop(expiry)
        return expiry[0][0] if expiry else None
