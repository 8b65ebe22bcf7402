"""``dynamo``: NVIDIA Dynamo's router queue (docs: "Deficit Round Robin Queue Scheduling").

- **policy classes**: a request's class is the lane the policy config routes
  it to. Each class holds a pending queue (FCFS within a class; Dynamo orders
  it by strict priority first, but simulated requests carry no priority), a
  deficit of earned, unspent credit and a quantum: ``quantum`` uncached prompt
  tokens times the lane's fair-share weight.
- **cost**: ``max(1, prompt - cached)`` tokens, fixed at enqueue; the model
  has no prefix cache, so ``cached`` is 0.
- **deficit round-robin**, work-conserving across the classes whose head can
  dispatch (a free seat and KV for its prompt, counting what this dispatch
  already released): a class whose deficit covers its head's cost dispatches
  it; otherwise every dispatchable class earns as many quanta as the one
  needing the fewest takes to afford its head (the rounds computed, not
  looped), and that one dispatches. A ring cursor starts each scan at the
  class served last while it can still pay, else at the next; an empty class
  resets its deficit to 0, a class whose head cannot dispatch keeps its
  deficit and earns nothing.
- **slo_ms**: a request still queued its class's TTFT target after it
  arrived is rejected with 529 (expired here; classes without a TTFT target
  never expire).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from slopolicy.config import PolicyConfig
from slopolicy.errors import UsageError
from slopolicy.sim.baselines.simple import FCFS, Lanes
from slopolicy.sim.interface import EngineView, Release, Released, SimAdmission
from slopolicy.sim.workload import SimRequest

__all__ = ("DynamoRouter",)


@dataclass(slots=True)
class _Class:
    """One policy class: its FIFO of ``(expires at, request)``, deficit and quantum."""

    quantum: float
    slo: float | None
    deficit: float = 0.0
    pending: deque[tuple[float, SimRequest]] = field(default_factory=deque)


def _cost(request: SimRequest) -> int:
    return max(1, request.prompt_tokens)  # no prefix cache: nothing is cached


class DynamoRouter(FCFS):
    """Dynamo's router queue in front of the engine; see the module docstring.

    ``quantum`` is the credit per round of a lane of weight 1, in prompt tokens.
    """

    name = "dynamo"

    def __init__(self, config: PolicyConfig, *, quantum: float = 1024.0) -> None:
        super().__init__()
        if not (math.isfinite(quantum) and quantum > 0):
            raise UsageError(f"quantum must be a positive number of tokens, got {quantum!r}")
        self._lanes = Lanes(config)
        self._classes = {
            lane: _Class(quantum * self._lanes.weights[lane], targets.ttft_target)
            for lane, targets in self._lanes.targets.items()
        }
        self._ring = list(self._classes)
        self._cursor = 0

    def submit(self, request: SimRequest, *, now: float) -> SimAdmission:
        lane = self._lanes.lane(request)
        chosen = self._classes[lane]
        expires = math.inf if chosen.slo is None else request.arrival + chosen.slo
        chosen.pending.append((expires, request))
        return SimAdmission(True, lane)

    def dispatch(self, now: float, engine: EngineView) -> Released:
        expired = self._expire(now)
        started: list[Release] = []
        while (index := self._select(engine)) is not None:
            chosen = self._classes[self._ring[index]]
            _, request = chosen.pending.popleft()
            chosen.deficit -= _cost(request)
            engine.release(request.prompt_tokens)
            started.append(Release(request.id, request.max_new_tokens))
            head = chosen.pending[0][1] if chosen.pending else None
            paid = head is not None and chosen.deficit >= _cost(head)
            self._cursor = index if paid else (index + 1) % len(self._ring)
        return Released(tuple(started), expired)

    def _select(self, engine: EngineView) -> int | None:
        """The ring index of the class to serve next, after crediting rounds; ``None``: none can."""
        size = len(self._ring)
        best: tuple[int, int] | None = None  # (rounds, index)
        dispatchable: list[_Class] = []
        for step in range(size):
            index = (self._cursor + step) % size
            chosen = self._classes[self._ring[index]]
            if not chosen.pending:
                chosen.deficit = 0.0
                continue
            if not engine.admissible(chosen.pending[0][1].prompt_tokens):
                continue
            dispatchable.append(chosen)
            short = _cost(chosen.pending[0][1]) - chosen.deficit
            rounds = max(0, math.ceil(short / chosen.quantum))
            if best is None or rounds < best[0]:
                best = (rounds, index)
        if best is None:
            return None
        for chosen in dispatchable:
            chosen.deficit += best[0] * chosen.quantum
        return best[1]

    def _expire(self, now: float) -> tuple[str, ...]:
        gone: list[str] = []
        for chosen in self._classes.values():
            # Arrival order is expiry order within a class: one slo per class.
            while chosen.pending and chosen.pending[0][0] <= now:
                gone.append(chosen.pending.popleft()[1].id)
        return tuple(gone)

    def wakeup(self) -> float | None:
        heads = [c.pending[0][0] for c in self._classes.values() if c.pending]
        soonest = min(heads, default=math.inf)
        return None if soonest == math.inf else soonest
