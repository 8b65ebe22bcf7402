"""Our scheduler: the real :class:`~slopolicy.Policy`, driven in virtual time.

Nothing of the policy is re-implemented here. This adapter turns simulated
requests into :class:`~slopolicy.Request` values, forwards each call with the
simulated ``now``, feeds the engine's signals every ladder tick (as the
gateway's periodic polling would), and keeps the fallback ladder's moves and
the overload state as a timeline for the report.

Timers: the policy evaluates its ladder inside ``dispatch`` once every
``evaluate_every`` seconds and expires queued requests at their deadlines, so
:meth:`PolicyScheduler.wakeup` asks for a dispatch at the next of those times.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection
from dataclasses import dataclass

from slopolicy.config import PolicyConfig
from slopolicy.core.decisions import Defer, Reject
from slopolicy.core.policy import Policy
from slopolicy.core.request import Request
from slopolicy.core.signals import EngineSignals
from slopolicy.core.tokens import HeuristicCounter
from slopolicy.errors import UsageError
from slopolicy.sim.engine import Scheduling
from slopolicy.sim.scheduler import Admission, EngineView, Release, Released
from slopolicy.sim.workload import SimRequest

__all__ = ("DEFAULT_SIGNALS", "SIGNALS", "LadderMove", "PolicyScheduler")

#: Engine signals the simulator can feed the policy.
SIGNALS = ("kv_usage", "waiting", "running", "decode_tps")
#: Those fed unless told otherwise (see :class:`PolicyScheduler`).
DEFAULT_SIGNALS = ("kv_usage", "waiting", "running")


@dataclass(frozen=True, slots=True)
class LadderMove:
    """One move of the fallback ladder: at ``at`` seconds to ``level`` (rung
    ``rung``), leaving the service in overload ``state``, because ``why``."""

    at: float
    level: int
    rung: str
    state: str
    why: str


class PolicyScheduler:
    """A :class:`~slopolicy.Policy` behind the simulator's scheduler interface.

    Args:
        policy: the policy, or a config to build one from (prompt lengths are
            given in tokens, so no tokenizer is loaded).
        signals: the engine signals fed to :meth:`Policy.observe` at every
            tick, from :data:`SIGNALS`. ``decode_tps`` is off by default: the
            model has no engine faults, so a drop in per-request decode speed
            only ever measures prefill interference, which the ladder's
            ``decode_tps_drop`` trigger would read as a sick engine.
        engine_priority: tell the engine each request's lane rank as its
            priority (vLLM ``--scheduling-policy priority`` with the request's
            ``priority``), so requests already released still start in lane
            order; otherwise the engine's queue is FCFS.
        name: the name in reports.
    """

    def __init__(
        self,
        policy: Policy | PolicyConfig,
        *,
        signals: Collection[str] = DEFAULT_SIGNALS,
        engine_priority: bool = True,
        name: str = "slopolicy",
    ) -> None:
        if isinstance(policy, PolicyConfig):
            policy = Policy(policy, counter=HeuristicCounter())
        unknown = set(signals) - set(SIGNALS)
        if unknown:
            raise UsageError(f"unknown signals {sorted(unknown)}; signals are {', '.join(SIGNALS)}")
        self.policy = policy
        self.name = name
        self.signals = frozenset(signals)
        self.scheduling: Scheduling = "priority" if engine_priority else "fcfs"
        ranks = {lane.name: rank for rank, lane in enumerate(policy.router.lanes)}
        self._ranks = ranks if engine_priority else dict.fromkeys(ranks, 0)
        self.moves: list[LadderMove] = []
        self._waits = {lane.name: lane.max_queue_wait for lane in policy.router.lanes}
        self._deadlines: list[tuple[float, str]] = []
        self._every = policy.health.evaluate_every
        self._ticks = policy.health.ladder is not None
        self._next_tick = 0.0
        self._last_decode: tuple[float, int] | None = None

    def submit(self, request: SimRequest, now: float) -> Admission:
        decision = self.policy.submit(
            Request(
                id=request.id,
                tenant=request.tenant,
                prompt_tokens=request.prompt_tokens,
                max_new_tokens=request.max_new_tokens,
                lane=request.lane,
                tier=request.tier,
            ),
            now,
        )
        if isinstance(decision, Defer):
            return _refusal(decision)
        if isinstance(decision, Reject):
            return Admission(False, decision.lane, decision.reason.code)
        heapq.heappush(self._deadlines, (now + self._waits[decision.lane], request.id))
        pushed = decision.displaced
        displaced = None if pushed is None else (pushed.finished.id, _refusal(pushed.refusal))
        return Admission(True, decision.lane, decision.reason.code, displaced=displaced)

    def dispatch(self, now: float, engine: EngineView) -> Released:
        if self._ticks and self.policy.health.due(now):
            self._next_tick = now + self._every  # dispatch evaluates the ladder now
        result = self.policy.dispatch(now)
        if result.ladder is not None:
            state, why = self.policy.overload()
            event = result.ladder
            self.moves.append(LadderMove(now, event.to_level, event.rung, state.value, why))
        ranks = self._ranks
        started = tuple(
            Release(s.id, s.request.max_new_tokens * s.request.sequences, ranks[s.lane])
            for s in result.started
        )
        return Released(started, tuple(f.id for f in result.expired))

    def first_token(self, request_id: str, now: float) -> None:
        self.policy.first_token(request_id, now)

    def tokens(self, request_id: str, count: int, now: float) -> None:
        self.policy.tokens(request_id, count, now)

    def finish(self, request_id: str, now: float, output_tokens: int) -> None:
        self.policy.finish(request_id, now, "completed", output_tokens=output_tokens)

    def wakeup(self) -> float | None:
        deadlines = self._deadlines
        while deadlines and self.policy.phase(deadlines[0][1]) != "queued":
            heapq.heappop(deadlines)
        times = [self._next_tick] if self._ticks else []
        if deadlines:
            times.append(deadlines[0][0])
        paced = self.policy.next_start()
        if paced is not None:
            times.append(paced)
        return min(times, default=None)

    def observe(self, engine: EngineView, now: float) -> None:
        wanted = self.signals
        if not wanted:
            return
        rate = None
        if "decode_tps" in wanted:
            decoded, last = engine.decode_tokens(), self._last_decode
            if last is not None and now > last[0]:
                rate = (decoded - last[1]) / (now - last[0])
            self._last_decode = (now, decoded)
        kv = min(1.0, max(0.0, engine.kv_usage())) if "kv_usage" in wanted else None
        self.policy.observe(
            EngineSignals(
                observed_at=now,
                kv_usage=kv,
                waiting=engine.waiting if "waiting" in wanted else None,
                running=engine.running if "running" in wanted else None,
                decode_tps=rate,
            ),
            now,
        )


def _refusal(decision: Defer) -> Admission:
    """A ``Defer`` as the simulator sees it: a refusal its client may retry."""
    return Admission(False, decision.lane, decision.reason.code, True, decision.retry_after)
