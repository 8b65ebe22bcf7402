"""``vllm-queue``: vLLM 0.33's queue limits, then FCFS.

vLLM refuses a request with 503 when its waiting queue already holds
``--max-num-queued-reqs`` requests or the request's prompt would take its
waiting prompt tokens over ``--max-num-queued-tokens``; what it accepts runs
FCFS, with no tenant fairness. vLLM sets no limit by default; the defaults
here (16 requests, 65,536 tokens: about what the engine prefills in half a
second at 8,192 tokens an iteration) are ours, sized for an interactive TTFT
target. The queue is the engine's own (read from the run's
:class:`~slopolicy.sim.view.EngineView`, live) plus requests that arrived at
the same instant and are not yet released.
"""

from __future__ import annotations

from slopolicy.sim.baselines.simple import FCFS
from slopolicy.sim.engine_spec import check_int
from slopolicy.sim.interface import EngineView, Released, SimAdmission
from slopolicy.sim.workload import SimRequest

__all__ = ("VLLMQueueLimits",)


class VLLMQueueLimits(FCFS):
    """FCFS behind vLLM's ``max_num_queued_reqs`` / ``max_num_queued_tokens``."""

    name = "vllm-queue"

    def __init__(
        self, *, max_num_queued_reqs: int = 16, max_num_queued_tokens: int = 65_536
    ) -> None:
        super().__init__()
        check_int("max_num_queued_reqs", max_num_queued_reqs, 1)
        check_int("max_num_queued_tokens", max_num_queued_tokens, 1)
        self.max_num_queued_reqs = max_num_queued_reqs
        self.max_num_queued_tokens = max_num_queued_tokens
        self._engine: EngineView | None = None  # none seen yet: nothing was released
        self._pending_tokens = 0

    def submit(self, request: SimRequest, *, now: float) -> SimAdmission:
        queued, tokens = len(self._pending), self._pending_tokens
        if self._engine is not None:
            queued += self._engine.waiting
            tokens += self._engine.waiting_tokens
        full = queued >= self.max_num_queued_reqs
        if full or tokens + request.prompt_tokens > self.max_num_queued_tokens:
            return SimAdmission(False, None, "queue_full", True)
        self._pending_tokens += request.prompt_tokens
        return super().submit(request, now=now)

    def dispatch(self, now: float, engine: EngineView) -> Released:
        self._engine = engine
        self._pending_tokens = 0
        return super().dispatch(now, engine)
