"""``vtc``: Virtual Token Counter fairness alone (Sheng et al., OSDI 2024).

Requests wait in a per-tenant fair queue (the core's
:class:`~slopolicy.core.fairqueue.FairQueue`, the counters our policy uses
inside a lane) and start, smallest counter first, while the engine has a free
seat and KV for the head's prompt (:meth:`EngineView.claim
<slopolicy.sim.view.EngineView.claim>`, which counts what this dispatch has
already released); a head that does not fit stops the dispatch (no skipping
ahead, as in the paper). Counters charge ``w_p·prompt`` at start and ``w_q``
per output token as it is reported. No lanes, ladder or quotas.
"""

from __future__ import annotations

from slopolicy.core.checks import MAX_COUNT
from slopolicy.core.queueing.fairqueue import FairQueue
from slopolicy.sim.baselines.simple import FCFS
from slopolicy.sim.interface import EngineView, Release, Released, SimAdmission
from slopolicy.sim.workload import SimRequest

__all__ = ("VTC",)


class VTC(FCFS):
    """Virtual Token Counters across tenants (weights 1), holding requests
    until the engine can start them. ``prompt_weight``/``output_weight`` are
    the paper's ``w_p``/``w_q``."""

    name = "vtc"

    def __init__(self, *, prompt_weight: float = 1.0, output_weight: float = 2.0) -> None:
        super().__init__()
        self._queue: FairQueue[SimRequest] = FairQueue(MAX_COUNT)
        self._tenants: dict[str, str] = {}
        self._prompt_weight = prompt_weight
        self._output_weight = output_weight

    def submit(self, request: SimRequest, *, now: float) -> SimAdmission:
        self._queue.push(request, request.tenant, 1.0)
        self._tenants[request.id] = request.tenant
        return SimAdmission(True)

    def dispatch(self, now: float, engine: EngineView) -> Released:
        started: list[Release] = []
        while (head := self._queue.peek()) is not None and engine.claim(head.prompt_tokens):
            self._queue.pop()
            self._queue.charge(head.tenant, self._prompt_weight * head.prompt_tokens)
            started.append(Release(head.id, head.max_new_tokens))
        return Released(tuple(started))

    def tokens(self, request_id: str, count: int, *, now: float) -> None:
        self._queue.charge(self._tenants[request_id], self._output_weight * count)

    def finish(self, request_id: str, *, now: float, output_tokens: int) -> None:
        del self._tenants[request_id]
