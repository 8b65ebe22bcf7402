"""Our scheduler: the real :class:`~slopolicy.Policy`, driven in virtual time.

Nothing of the policy is re-implemented here. This adapter turns simulated
requests into :class:`~slopolicy.Request` values, forwards each call with the
simulated ``now``, feeds the engine's signals every ladder tick (as the
gateway's periodic polling would), and keeps the fallback ladder's moves and
the overload state as a timeline for the report.

Timers: the policy evaluates its ladder inside ``dispatch`` once every
``evaluate_every`` seconds, expires queued requests at their deadlines and
paces starts, so :meth:`PolicyScheduler.wakeup` asks for a dispatch at
:meth:`Policy.next_wakeup`.
Idle time costs nothing: once nothing is queued or running and the ladder can
no longer move, the ticks stop until the next event, so a trace with a
month-long gap replays in as many steps as one without it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from slopolicy.config import PolicyConfig
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.decisions import Defer, Reject
from slopolicy.core.health.signals import EngineSignals
from slopolicy.core.outcome import held_name
from slopolicy.core.policy import Policy
from slopolicy.errors import UsageError
from slopolicy.sim.engine import Scheduling
from slopolicy.sim.interface import EngineView, Release, Released, SimAdmission
from slopolicy.sim.workload import SimRequest

__all__ = ("DEFAULT_SIGNALS", "SIGNALS", "LadderMove", "PolicyScheduler")

#: Engine signals the simulator can feed the policy.
SIGNALS = (
    "kv_usage",
    "waiting",
    "running",
    "decode_tps",
    "preemption_rate",
    "kv_capacity_tokens",
)
#: Those fed unless told otherwise (see :class:`PolicyScheduler`).
DEFAULT_SIGNALS = ("kv_usage", "waiting", "running", "preemption_rate", "kv_capacity_tokens")


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
            ``preemption_rate`` is the engine's preemptions per second since
            the previous tick: :meth:`Policy.diagnose` reads it as KV
            pressure, and while it is above 0 no tenant starts past its
            share of the KV pool. ``kv_capacity_tokens`` is the engine's
            KV pool, as vLLM's ``vllm:cache_config_info`` tells it: the
            ledger counts it (at most the config's ``kv.num_blocks``, where
            set).
        engine_priority: tell the engine each request's lane rank as its
            priority (vLLM ``--scheduling-policy priority`` with the request's
            ``priority``), so requests already released still start in lane
            order, and a request started over its tenant's share
            (:attr:`Started.over_share <slopolicy.Started.over_share>`) the
            rank plus the number of lanes, so an engine that must preempt
            takes it before every request within its share; otherwise the
            engine's queue is FCFS.
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
        ranks = {lane: rank for rank, lane in enumerate(policy.lanes)}
        self._ranks = ranks if engine_priority else {}  # none: every priority 0
        self.moves: list[LadderMove] = []
        self._settle = policy.ladder_settle_time
        self._now = 0.0  # the latest time this scheduler was called at
        self._last_decode: tuple[float, int] | None = None
        self._last_preempted: tuple[float, int] | None = None
        # Idle ticks: since when the ladder's inputs stopped changing, and
        # whether the ticks sleep until the next event.
        self._quiet_since: float | None = None
        self._asleep = False

    def submit(self, request: SimRequest, *, now: float) -> SimAdmission:
        self._now = now
        decision = self.policy.submit(request.to_request(), now=now)
        if isinstance(decision, Defer):
            return _refusal(decision)
        if isinstance(decision, Reject):
            return SimAdmission(False, decision.lane, decision.reason.code)
        pushed = decision.displaced
        displaced = None if pushed is None else (pushed.finished.id, _refusal(pushed.refusal))
        return SimAdmission(True, decision.lane, decision.reason.code, displaced=displaced)

    def dispatch(self, now: float, engine: EngineView) -> Released:
        if self._asleep:
            # The first event after idle time: what the last skipped tick
            # would have observed (the idle engine), so the ladder reads fresh signals.
            self._asleep = False
            self.observe(engine, now)
        self._now = now
        result = self.policy.dispatch(now=now)
        if self._settle is not None:
            self._asleep = self._settled(now)
        if result.ladder is not None:
            state, why = self.policy.overload()
            event = result.ladder
            self.moves.append(LadderMove(now, event.to_level, event.rung, state.value, why))
        ranks = self._ranks
        started = tuple(
            Release(
                s.id,
                s.request.max_new_tokens,
                s.engine_priority(ranks) or 0,
                s.request.model,  # set only by the ladder's cheaper_model rung
            )
            for s in result.started
        )
        expired, revoked = result.expired, tuple(f.id for f in result.revoked)
        if not expired:
            return Released(started, revoked=revoked)
        held_by = {f.id: held_name(f.held_by) for f in expired}
        return Released(started, tuple(f.id for f in expired), held_by, revoked)

    def first_token(self, request_id: str, *, now: float) -> None:
        self._now = now
        self.policy.first_token(request_id, now=now)

    def tokens(self, request_id: str, count: int, *, now: float) -> None:
        self._now = now
        self.policy.tokens(request_id, count, now=now)

    def finish(self, request_id: str, *, now: float, output_tokens: int) -> None:
        self._now = now
        self.policy.finish(request_id, now=now, outcome="completed", output_tokens=output_tokens)

    def _settled(self, now: float) -> bool:
        """Whether further ladder ticks would change nothing until the next
        event (and since when that has been so, kept in ``_quiet_since``).

        Quiet (:meth:`Policy.quiet`: nothing live, the watched lane's windows
        empty), every input of the ladder is constant: no latency, no queue,
        the idle engine's signals. Under constant inputs the ladder has made
        all its moves once :attr:`Policy.ladder_settle_time` has passed quiet.
        With ``decode_tps`` fed, the decode baseline the drop is read against
        still moves while idle, so idle time is ticked through then.
        """
        if "decode_tps" in self.signals:
            return False
        if not self.policy.quiet(now=now):
            self._quiet_since = None
            return False
        if self._quiet_since is None:
            self._quiet_since = now
        assert self._settle is not None  # ticks run only with a ladder
        return now - self._quiet_since >= self._settle

    def wakeup(self) -> float | None:
        # Asleep, nothing is live: no deadline, no paced start, and the
        # ladder's ticks wait for the next event.
        return None if self._asleep else self.policy.next_wakeup(now=self._now)

    def observe(self, engine: EngineView, now: float) -> None:
        wanted = self.signals
        if not wanted:
            return
        rate = preempting = None
        if "decode_tps" in wanted:
            decoded, last = engine.decode_tokens(), self._last_decode
            rate = _rate(decoded, last, now)
            self._last_decode = (now, decoded)
        if "preemption_rate" in wanted:
            preempted, last = engine.preemptions(), self._last_preempted
            preempting = _rate(preempted, last, now)
            self._last_preempted = (now, preempted)
        kv = min(1.0, max(0.0, engine.kv_usage())) if "kv_usage" in wanted else None
        self.policy.observe(
            EngineSignals(
                observed_at=now,
                kv_usage=kv,
                waiting=engine.waiting if "waiting" in wanted else None,
                running=engine.running if "running" in wanted else None,
                decode_tps=rate,
                preemption_rate=preempting,
                kv_capacity_tokens=(
                    engine.num_blocks * engine.block_size
                    if "kv_capacity_tokens" in wanted
                    else None
                ),
            ),
            now=now,
        )


def _rate(count: int, last: tuple[float, int] | None, now: float) -> float | None:
    """``count``'s growth per second since ``last`` (``(at, count)``); ``None``
    without a previous reading or time between them."""
    if last is None or not now > last[0]:
        return None
    return (count - last[1]) / (now - last[0])


def _refusal(decision: Defer) -> SimAdmission:
    """A ``Defer`` as the simulator sees it: a refusal its client may retry."""
    return SimAdmission(False, decision.lane, decision.reason.code, True, decision.retry_after)
