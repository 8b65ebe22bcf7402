"""The sans-IO policy: estimate, route, quota, queue fairly, reserve KV, release once.

``Policy`` composes the core objects and owns every live request's record.
It never reads a clock: each call takes ``now`` (monotonic seconds; a ``now``
earlier than one already seen counts as the latest seen). A ``now`` that is
not a time in monotonic seconds (NaN, an infinity, or past ``±1e11`` s, as a
``time.time_ns()`` or millisecond value is) raises :class:`UsageError` and
changes nothing, whether or not a good ``now`` came before it: see
:func:`~slopolicy.core.checks.time_problem`. The async gate, the simulator and
tests all drive this same object.

Lifecycle::

    submit ─► route ─► ladder ─► quota ─► lane queue ─► dispatch ─► tokens ─► finish
                │         │         │         │  └─ deadline passes ─► expired
                └─────────┴─────────┴─ refused┘     cancel (queued or running) ─► cancelled

Quota (cost units and concurrency) is taken at submit and settled once at the
end against the actual tokens; KV blocks are reserved at dispatch for the
prompt plus the output budget and released at the end. Fair-queue counters
are charged the prompt's cost at dispatch and output tokens as they arrive.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from slopolicy.core.checks import check_count, check_now
from slopolicy.core.cost.outputs import OutputForecast
from slopolicy.core.cost.tokens import TokenCounter
from slopolicy.core.decisions import (
    Admit,
    Decision,
    Defer,
    Demote,
    Displaced,
    Reason,
    Reject,
    Step,
)
from slopolicy.core.health.findings import Finding
from slopolicy.core.health.health import Health
from slopolicy.core.health.signals import EngineSignals, check_signals
from slopolicy.core.kv import KVReservation
from slopolicy.core.ladder.events import LadderEvent
from slopolicy.core.ladder.ladder import FallbackLadder
from slopolicy.core.ladder.overload import OverloadState
from slopolicy.core.ladder.rungs import AdmissionAction
from slopolicy.core.lifecycle import Dispatch, Entry, Phase, PolicyStatistics, Started
from slopolicy.core.outcome import Finished, Outcome, ending
from slopolicy.core.queueing.counters import check_weight
from slopolicy.core.queueing.deadlines import Deadlines
from slopolicy.core.queueing.pacing import DispatchPace
from slopolicy.core.queueing.prefill import PrefillGate
from slopolicy.core.queueing.scheduler import LaneScheduler
from slopolicy.core.queueing.seats import Seats
from slopolicy.core.queueing.ttft import FirstTokenCheck
from slopolicy.core.quota.tenants import TenantQuotas
from slopolicy.core.request import Request
from slopolicy.core.reservations import Reservations
from slopolicy.core.router import LaneRouter, RoutingRule
from slopolicy.core.slo.targets import SLOTargets
from slopolicy.core.slo.tracker import CostModel
from slopolicy.core.specs import LaneSpec
from slopolicy.core.tasks.records import TaskEnded
from slopolicy.core.tasks.table import TaskTable
from slopolicy.core.tasks.trackers import TaskTrackers
from slopolicy.core.tools.limits import ToolLimits
from slopolicy.core.tools.pool import ToolPool
from slopolicy.errors import UsageError

__all__ = ("Policy", "PolicySource", "PolicySpec")


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """Everything a :class:`Policy` is built from, as plain core objects.

    Attributes:
        router: routes requests to lanes (and owns the estimator and tiers).
        kv_blocks: blocks in the engine's KV pool.
        kv_block_size: tokens per block.
        kv_output_quantile: a running request reserves its prompt plus this
            quantile of its lane's recent answers (per sequence, at most its
            ``max_new_tokens``; :class:`~slopolicy.core.cost.outputs.OutputForecast`),
            growing as its answer passes it; ``None``: the worst case,
            ``prompt + max_new_tokens``.
        max_running: seats (sequences) the engine may run at once.
        pace: paces starts to a rate in cost units per second, or ``None``.
        max_tenants: tenant quota states kept before idle ones are evicted.
        targets: SLO targets per lane (lanes without an entry have none).
        ladder: the fallback ladder, or ``None``.
        watch_lane: lane whose SLO drives the ladder (default: the first lane).
        evaluate_every: seconds between automatic ladder evaluations in dispatch.
        signal_max_age: seconds after which an engine signal is stale.
        max_tracked_tenants: per-tenant SLO trackers kept.
        prefill_horizon: seconds of prefill backlog the engine is handed
            ahead (:class:`~slopolicy.core.queueing.prefill.PrefillGate`), or ``None``
            for no gate.
        tools: the limits of the tool pool (:attr:`Policy.tools`); ``None``
            limits nothing.
    """

    router: LaneRouter
    kv_blocks: int
    kv_block_size: int
    max_running: int
    kv_output_quantile: float | None = None
    pace: DispatchPace | None = None
    max_tenants: int = 100_000
    targets: Mapping[str, SLOTargets] = field(default_factory=dict)
    ladder: FallbackLadder | None = None
    watch_lane: str | None = None
    evaluate_every: float = 1.0
    signal_max_age: float = 10.0
    max_tracked_tenants: int = 1024
    prefill_horizon: float | None = None
    tools: ToolLimits | None = None


class PolicySource(Protocol):
    """Anything that builds a :class:`PolicySpec`, such as ``PolicyConfig``."""

    def to_spec(
        self,
        *,
        counter: TokenCounter | None = None,
        rules: Sequence[RoutingRule] = (),
        compress: Callable[[Request], Request] | None = None,
    ) -> PolicySpec: ...


class Policy:
    """Admission, fair dispatch and exactly-once release for one engine.

    Build it from a ``PolicyConfig`` (``Policy(config)``) or a
    :class:`PolicySpec`. ``counter`` overrides the configured tokenizer,
    ``rules`` adds custom routing rules, ``compress`` is the ladder's
    prompt-compression hook, and ``cost_model`` prices finished requests for
    the cost-per-success figures (default: cost units).
    """

    def __init__(
        self,
        config: PolicySource | PolicySpec,
        *,
        counter: TokenCounter | None = None,
        rules: Sequence[RoutingRule] = (),
        compress: Callable[[Request], Request] | None = None,
        cost_model: CostModel | None = None,
    ) -> None:
        if isinstance(config, PolicySpec):
            spec = config
        else:
            spec = config.to_spec(counter=counter, rules=rules, compress=compress)
        if spec.max_running < 1:
            raise UsageError("max_running must be >= 1")
        for tier in spec.router.tiers.tiers.values():
            check_weight(tier.weight, f"tier {tier.name!r} weight")
        lanes = [lane.name for lane in spec.router.lanes]
        #: Slots, rate limits and fair waiting for the host's tool calls.
        self.tools = ToolPool(spec.tools)
        self.health = Health(
            {name: spec.targets.get(name, SLOTargets()) for name in lanes},
            watch_lane=spec.watch_lane or lanes[0],
            ladder=spec.ladder,
            evaluate_every=spec.evaluate_every,
            signal_max_age=spec.signal_max_age,
            max_tenants=spec.max_tracked_tenants,
            cost_model=cost_model,
            tool_signal=self.tools.signal,
        )
        self._first_lane = lanes[0]
        self.router = spec.router
        self._lanes = {lane.name: lane for lane in spec.router.lanes}
        reserves = {lane.name: lane.kv_reserve for lane in spec.router.lanes if lane.kv_reserve}
        self.kv = KVReservation(spec.kv_blocks, spec.kv_block_size, reserves)
        quantile = spec.kv_output_quantile
        #: What running requests hold in the KV ledger: prompts plus forecast answers.
        self.reservations = Reservations(
            self.kv, None if quantile is None else OutputForecast(lanes, quantile=quantile)
        )
        self.quotas = TenantQuotas(max_tenants=spec.max_tenants)
        self._queues: LaneScheduler[Entry] = LaneScheduler(
            [(lane.name, lane.weight, lane.queue_capacity) for lane in spec.router.lanes]
        )
        self.max_running = spec.max_running
        #: The engine's running seats: one per sequence, lane caps and reserves.
        self.seats = Seats(
            spec.max_running,
            {lane.name: lane.max_running for lane in spec.router.lanes},
            {lane.name: lane.seat_reserve for lane in spec.router.lanes},
        )
        self.pace = spec.pace
        horizon = spec.prefill_horizon
        #: Each lane's prefill gate (``None``: no gates). Per lane, so work of
        #: one lane never holds another's starts back: an engine that honours
        #: priorities computes the more urgent lane's prompts first anyway.
        self.prefill: dict[str, PrefillGate] | None = (
            None if horizon is None else {name: PrefillGate(horizon) for name in lanes}
        )
        # The latency bound queued requests expire at, for lanes that ask for it.
        self._slo_bounds: dict[str, float] = {}
        # The TTFT targets of those lanes: a request that cannot have its first
        # token by arrival + target (per the engine's learned TTFT) leaves then.
        ttft_bounds: dict[str, float] = {}
        for lane in spec.router.lanes:
            targets = spec.targets.get(lane.name, SLOTargets())
            bound = targets.ttft_target if targets.ttft_target is not None else targets.e2e_p95
            if lane.slo_deadline and bound is not None:
                self._slo_bounds[lane.name] = bound
                if targets.ttft_target is not None:
                    ttft_bounds[lane.name] = bound
        #: The engine's TTFT per lane, and the prompts ahead of a start.
        self.first_tokens = FirstTokenCheck(lanes, ttft_bounds)
        self._entries: dict[str, Entry] = {}
        # Ids prepare accepted that await their enqueue, refuse or withdraw.
        self._prepared: set[str] = set()
        self._quota_delegated = False
        #: Agent tasks under way (requests with a ``task``), and how they ended.
        self.tasks = TaskTable()
        self.task_trackers = TaskTrackers(max_tenants=spec.max_tracked_tenants)
        self._task_slos = {lane.name: lane.task for lane in spec.router.lanes}
        # Deadlines, and each lane's oldest waiting request: the watched
        # lane's oldest one's age is a live queue-wait signal for the ladder.
        self._deadlines = Deadlines(lanes)
        self._running = 0
        self._now = float("-inf")
        self._submitted = 0
        self._outcomes = dict.fromkeys(Outcome, 0)

    # -- submit -------------------------------------------------------------

    def submit(self, request: Request, now: float) -> Decision:
        """Route ``request`` and, if accepted, queue it in its lane.

        Returns the routing decision: ``Admit``/``Demote`` when queued (start it
        only once :meth:`dispatch` returns it), ``Defer`` or ``Reject`` when
        refused (by a rule, the ladder, the tenant's quota, or a full queue). A
        full queue makes room by pushing out the newest request of the tenant
        with the most waiting per unit weight, if that tenant has more than the
        arrival's would: that request has then ended, refused ``queue_full``,
        and the accepted decision's ``displaced`` carries it, to tell its
        caller. A request id that is still live raises :class:`UsageError`.
        Equivalent to :meth:`prepare` then :meth:`enqueue`.
        """
        decision = self._route(request, now)
        if isinstance(decision, (Admit, Demote)):
            decision = self._admit(decision, self._now)
        return decision

    def prepare(self, request: Request, now: float) -> Decision:
        """The first half of :meth:`submit`: route ``request`` and apply the
        fallback ladder, without queueing it or taking quota.

        A shared quota store (several gateway replicas, see
        :meth:`delegate_quota`) sits between this and :meth:`enqueue`: take the
        tenant's quota for the accepted decision's lane and cost there. An
        accepted decision then gets exactly one outcome: :meth:`enqueue`,
        :meth:`refuse` or :meth:`withdraw`; until it does, its id is live (a
        second submit of it raises), and a second outcome raises
        :class:`UsageError`.
        """
        decision = self._route(request, now)
        if isinstance(decision, (Admit, Demote)):
            self._prepared.add(request.id)
        return decision

    def _route(self, request: Request, now: float) -> Decision:
        """:meth:`prepare` without registering the accepted decision."""
        now = self._advance(now)
        if request.id in self._entries or request.id in self._prepared:
            raise UsageError(f"request id {request.id!r} is already live")
        self._submitted += 1
        decision = self.router.route(request)
        if isinstance(decision, (Admit, Demote)):
            decision = self._degrade(decision)
        if not decision.accepted:
            self._rejected(decision, request.tenant, now)
        return decision

    def enqueue(self, decision: Admit | Demote, now: float) -> Decision:
        """The second half of :meth:`submit`: queue a decision :meth:`prepare`
        accepted. Takes the tenant's quota from :attr:`quotas` unless the
        quota is delegated (:meth:`delegate_quota`). Returns ``decision``
        (with what it ``displaced`` from a full queue, as :meth:`submit`), or the
        refusal that replaced it."""
        now = self._advance(now)
        self._resolve(decision)
        return self._admit(decision, now)

    def _resolve(self, decision: Admit | Demote) -> None:
        """Give a prepared decision its one outcome (validated, then recorded)."""
        request_id = decision.request.id
        if request_id not in self._prepared:
            raise UsageError(
                f"request {request_id!r} has no prepared decision awaiting an outcome "
                "(never prepared, or already enqueued, refused or withdrawn)"
            )
        self._prepared.remove(request_id)

    def delegate_quota(self) -> None:
        """Tenant quotas are taken and settled outside this policy from now on
        (a shared quota store: see :class:`~slopolicy.runtime.store_quota.StoreQuota`):
        :meth:`submit` and :meth:`enqueue` take none from :attr:`quotas`, and
        the caller settles its quota with the cost in each request's
        :class:`Finished` record. Only while nothing is live (else
        :class:`UsageError`); idempotent."""
        if self._entries or self._prepared:
            raise UsageError("delegate the quota before any request is live")
        self._quota_delegated = True

    @property
    def quota_delegated(self) -> bool:
        """Whether tenant quotas are taken outside this policy (:meth:`delegate_quota`)."""
        return self._quota_delegated

    def _admit(self, decision: Admit | Demote, now: float) -> Decision:
        """:meth:`enqueue` once ``now`` is advanced and the id is known not live."""
        result = self._enqueue(decision, now)
        if not result.accepted:
            self._rejected(result, decision.request.tenant, now)
        return result

    def refuse(
        self,
        decision: Admit | Demote,
        reason: Reason,
        message: str,
        now: float,
        *,
        retry_after: float | None = None,
        http_status: int = 429,
    ) -> Decision:
        """Refuse a decision :meth:`prepare` accepted, for a cause found outside
        the policy (a shared quota store's refusal), instead of :meth:`enqueue`.

        Records the request as rejected and returns the ``Defer`` (503, a
        ``retry_after``, or a transient reason) or ``Reject`` to answer with;
        the decision's steps name the cause ``quota``."""
        now = self._advance(now)
        self._resolve(decision)
        result = _refuse(decision, reason, message, retry_after, http_status, "quota")
        self._rejected(result, decision.request.tenant, now)
        return result

    def withdraw(self, decision: Admit | Demote, now: float) -> None:
        """A decision :meth:`prepare` accepted will not be enqueued after all:
        the caller went away (cancelled) before the quota store answered.
        Counted as ``cancelled``; nothing else was held."""
        self._advance(now)
        self._resolve(decision)
        self._outcomes[Outcome.CANCELLED] += 1

    def _rejected(self, decision: Decision, tenant: str, now: float) -> None:
        self._outcomes[Outcome.REJECTED] += 1
        self.health.record_rejected(decision.lane or self._first_lane, tenant, now)

    def _degrade(self, decision: Admit | Demote) -> Decision:
        """Apply the fallback ladder's active rungs to an accepted decision."""
        ladder = self.health.ladder
        if ladder is None or ladder.level == 0:
            return decision
        lane = decision.lane
        task = decision.request.task
        if task is not None and task.first and self._task_slos[lane] is not None:
            # Under pressure, what can still finish goes first: a new task's
            # first turn waits, the turns of tasks under way are served.
            message = "under overload a new task waits while tasks under way finish"
            steps = (*decision.steps, Step("fallback", lane, message))
            return Defer(
                Reason.OVERLOAD_SHED, message, None, 503, lane, steps, decision.prompt_tokens
            )
        verdict = ladder.admission(lane)
        if verdict is not None and verdict.action is AdmissionAction.SHED:
            steps = (*decision.steps, Step("fallback", lane, verdict.message))
            return Defer(
                Reason.OVERLOAD_SHED,
                verdict.message,
                verdict.retry_after,
                503,
                lane,
                steps,
                decision.prompt_tokens,
            )
        degraded, applied = ladder.apply(decision.request, lane)
        if not applied:
            return decision
        cost = self.router.estimator.score(
            decision.prompt_tokens, degraded.output_budget, degraded.tool_risk
        )
        steps = (
            *decision.steps,
            *(Step("fallback", lane, "rung {} applied", (name,)) for name in applied),
        )
        return dataclasses.replace(
            decision, request=degraded, cost=cost, steps=steps, rungs=applied
        )

    def _enqueue(self, decision: Admit | Demote, now: float) -> Decision:
        lane = self._lanes[decision.lane]
        request = decision.request
        # The request's counts were checked when it was made.
        reservations, prompt = self.reservations, decision.prompt_tokens
        worst = reservations.worst_case(prompt, request.max_new_tokens, request.sequences)
        most = self.kv.capacity_blocks(lane.name)
        if worst > most:
            message = f"needs {worst:,} KV blocks; lane {lane.name!r} can hold at most {most:,}"
            return _refuse(decision, Reason.PROMPT_TOO_LONG, message, None, 413, "kv capacity")
        needed, reserved_output = reservations.plan(
            lane.name, prompt, request.max_new_tokens, request.sequences
        )
        deadline = lane_deadline = now + lane.max_queue_wait
        bound = self._slo_bounds.get(lane.name)
        if bound is not None and now + bound < deadline:
            deadline = now + bound  # past it the request can only miss
        task, task_slo = request.task, self._task_slos[lane.name]
        if task is not None:
            # The pace a turn goes at now: the lane's median turn, end to end.
            pace = self.health.trackers.lane(lane.name).quantile("e2e", 0.5, now)
            told = self.tasks.check(task, request.tenant, lane.name, task_slo, now, turn_time=pace)
            if told is not None:
                if told.reason is Reason.TASK_DEADLINE_LOST:
                    self._tasks_ended([self.tasks.lost(task, now)])
                return _refuse(decision, told.reason, told.message, None, told.http_status, "task")
            task_deadline = self.tasks.deadline(task, task_slo, now)
            if task_deadline is not None and task_deadline < deadline:
                deadline = task_deadline  # a turn started past it cannot complete its task
        tier = self.router.tiers.get(decision.tier)
        assert tier is not None  # the router only names tiers it knows
        if not self._quota_delegated:
            refusal = self.quotas._grant(request.tenant, tier, lane.name, decision.cost, now)
            if refusal is not None:
                return _refuse(
                    decision,
                    refusal.reason,
                    refusal.message,
                    refusal.retry_after,
                    refusal.http_status,
                    "quota",
                )
        if request.deadline is not None and request.deadline < deadline:
            deadline = request.deadline
        entry = Entry(
            request,
            lane.name,
            tier.weight,
            decision.prompt_tokens,
            needed,
            decision.cost,
            now,
            deadline,
            decision.rungs,
        )
        entry.kv_output = reserved_output
        queues = self._queues
        if not queues._push(lane.name, entry, request.tenant, tier.weight):
            # Full: room is made only from a tenant holding more than its share.
            victim = queues._displaced(lane.name, request.tenant, tier.weight)
            if victim is None:
                self._settle(entry, 0.0, now)
                message = (
                    f"lane {lane.name!r} queue is full ({lane.queue_capacity:,} waiting) "
                    f"and tenant {request.tenant!r} already has its share of it"
                )
                return _refuse(
                    decision, Reason.QUEUE_FULL, message, lane.max_queue_wait, 503, "queue"
                )
            queues.remove(lane.name, victim)
            displaced = self._displace(victim, lane, now)
            queues._push(lane.name, entry, request.tenant, tier.weight)
            decision = dataclasses.replace(decision, displaced=displaced)
        self._entries[request.id] = entry
        self._deadlines.add(entry, lane_deadline)
        if task is not None:
            self._tasks_ended(
                self.tasks.admitted(task, request.id, request.tenant, lane.name, task_slo, now)
            )
        return decision

    def _displace(self, entry: Entry, lane: LaneSpec, now: float) -> Displaced:
        """End ``entry``, just pushed out of ``lane``'s full queue, as refused."""
        message = (
            f"pushed out of lane {lane.name!r}'s full queue ({lane.queue_capacity:,} waiting) "
            f"by a tenant with fewer waiting: tenant {entry.tenant!r} had the most per unit weight"
        )
        step = Step("queue", lane.name, message)
        refusal = Defer(Reason.QUEUE_FULL, message, lane.max_queue_wait, 503, lane.name, (step,))
        return Displaced(self._end_queued(entry, Outcome.REJECTED, now), refusal)

    def _settle(self, entry: Entry, cost: float, now: float) -> None:
        """Settle and release the entry's quota, when this policy holds it."""
        if not self._quota_delegated:  # its own live grant, checked values
            self.quotas._close_held(entry.tenant, entry.lane, entry.cost, cost, now)

    # -- dispatch -----------------------------------------------------------

    def dispatch(self, now: float, *, max_expired: int | None = None) -> Dispatch:
        """Expire overdue queued requests, then start every request that fits.

        Candidates come in fair order (lanes by weighted virtual time, tenants
        inside a lane by virtual token counters); the first whose KV
        reservation fits starts, and the loop repeats until the engine is full,
        no lane's head fits, or the dispatch rate (``engine.dispatch_rate``)
        holds the next start back until :meth:`next_start`. Within a lane the
        head is never skipped.

        ``max_expired`` bounds one call's work on overdue requests (``None``:
        no bound): at most that many expire, earliest deadline first, and while
        more are overdue nothing starts (an overdue request must not start), so
        a caller that gets ``max_expired`` back calls again to go on.
        """
        if max_expired is not None and (
            isinstance(max_expired, bool) or not isinstance(max_expired, int) or max_expired < 1
        ):
            raise UsageError(f"max_expired must be an int >= 1 or None, got {max_expired!r}")
        now = self._advance(now)
        event = self.evaluate(now) if self.health.due(now) else None
        due = self.tasks.next_due()
        if due is not None and due <= now:
            self._tasks_ended(self.tasks.sweep(now))
        expired = self._expire(now, max_expired)
        started: list[Started] = []
        if len(expired) == max_expired and self._overdue(now):
            return Dispatch((), tuple(expired), event)
        while not self.seats.full:
            entry = self._start_next(now, expired)
            if entry is None:
                break
            assert entry.dispatched_at is not None
            started.append(
                Started(
                    entry.id,
                    entry.tenant,
                    entry.lane,
                    entry.request,
                    entry.kv_blocks,
                    entry.dispatched_at - entry.arrival,
                    entry.rungs,
                )
            )
        return Dispatch(tuple(started), tuple(expired), event)

    def _start_next(self, now: float, expired: list[Finished]) -> Entry | None:
        pace = self.pace
        if pace is not None and not pace._ready(now):
            return None  # the next start, whichever it is, waits for the rate
        while True:  # again only when a lost head left: the candidates changed
            for lane, entry in self._queues._candidates():  # they change only through it
                needed = self.seats.needed(lane, entry.request.sequences)
                if self.health.paused(lane) or not self.seats.fits(lane, needed):
                    continue
                gate = None if self.prefill is None else self.prefill[lane]
                if gate is not None and not gate.ready(now):
                    continue  # the engine has enough of this lane's prompts; their order stays ours
                if self.first_tokens.lost(lane, entry.prompt_tokens, entry.arrival, now):
                    self._queues._pop(lane)
                    expired.append(self._end_queued(entry, Outcome.EXPIRED, now))
                    break
                if self.kv._reserve(entry.id, lane, entry.kv_blocks, now):
                    self._start(lane, entry, gate, needed, now)
                    return entry
            else:
                return None

    def _start(
        self, lane: str, entry: Entry, gate: PrefillGate | None, seats: int, now: float
    ) -> None:
        """Start ``entry``, the head of ``lane`` whose KV is now reserved, on ``seats`` seats."""
        self._queues._pop(lane)
        # Fair-queue counters are charged what is known to be served: the
        # prompt now, output tokens as they arrive (VTC's order), so nothing
        # has to be refunded later.
        prompt_cost = self.router.estimator.score(entry.prompt_tokens, 0, entry.request.tool_risk)
        self._queues._charge(lane, entry.tenant, prompt_cost, entry.weight)
        if self.pace is not None:
            self.pace._charge(entry.cost, now)
        if gate is not None:
            gate.started(entry.prompt_tokens, now)
        entry.ahead = self.first_tokens.started(lane, entry.prompt_tokens)
        entry.phase = Phase.RUNNING
        entry.dispatched_at = now
        if entry.request.task is not None:
            self.tasks.started(entry.request.task, entry.id)
        self._running += 1
        self.seats.take(entry.id, lane, seats)

    def next_deadline(self) -> float | None:
        """The earliest deadline among queued requests (monotonic seconds), or
        ``None`` when nothing is queued: the next time :meth:`dispatch` has a
        request to expire. Amortized ``O(lanes)``."""
        return self._deadlines.next()

    def can_start(self, now: float) -> bool:
        """Whether a :meth:`dispatch` at ``now`` could start anything: an engine
        slot is free and the dispatch rate allows a start (queued heads, KV and
        paused lanes aside). A read."""
        check_now(now)
        pace, gates = self.pace, self.prefill
        return (
            not self.seats.full
            and (pace is None or pace._ready(now))
            and (gates is None or any(gate.ready(now) for gate in gates.values()))
        )

    def next_start(self) -> float | None:
        """When the dispatch rate (``engine.dispatch_rate``) or the prefill
        gate (``engine.prefill_horizon_s``) lets the next queued request start
        (monotonic seconds), if one of them is what holds it back now;
        ``None`` when neither does, with nothing queued, or with the engine
        full (a finish dispatches then). A first token may open the prefill
        gate earlier. Call :meth:`dispatch` at that time."""
        pace, gates = self.pace, self.prefill
        if (
            (pace is None and gates is None)
            or len(self._entries) == self._running
            or self.seats.full
        ):
            return None
        ready = self._now if pace is None else pace._ready_at(self._now)
        if gates is not None:  # the first lane with waiting work whose gate opens
            opens = [
                gate.ready_at(self._now)
                for lane, gate in gates.items()
                if len(self._queues.queue(lane))
            ]
            ready = max(ready, min(opens, default=self._now))
        return ready if ready > self._now else None

    def next_wakeup(self, now: float) -> float | None:
        """When a :meth:`dispatch` next has work if no other call comes first
        (monotonic seconds, never before ``now`` or the latest ``now`` seen),
        as aioquic's ``get_timer()``: the earliest of the next queue deadline
        (:meth:`next_deadline`), the next paced or prefill-gated start
        (:meth:`next_start`) and the next ladder evaluation; ``None`` when none
        is pending. Before then a dispatch starts, expires and evaluates
        nothing, provided the caller dispatched after its last other call (as
        the Gate and the simulator do). A read."""
        check_now(now)
        at = max(now, self._now)
        wake = math.inf
        for when in (self.next_deadline(), self.next_start(), self.health.next_evaluation):
            if when is not None and when < wake:
                wake = when
        return None if wake == math.inf else max(wake, at)

    def _overdue(self, now: float) -> bool:
        deadline = self.next_deadline()
        return deadline is not None and deadline <= now

    def _expire(self, now: float, limit: int | None = None) -> list[Finished]:
        expired: list[Finished] = []
        deadlines = self._deadlines
        if now < deadlines.floor:  # the usual case: nothing can be overdue yet
            return expired
        while len(expired) != limit:
            entry = deadlines.pop_overdue(now)
            if entry is None:
                break
            self._queues.remove(entry.lane, entry)
            expired.append(self._end_queued(entry, Outcome.EXPIRED, now))
        return expired

    # -- running requests ---------------------------------------------------

    def first_token(self, request_id: str, now: float) -> None:
        """The first output token of a started request arrived."""
        entry = self._running_entry(request_id)
        now = self._advance(now)
        if entry.first_token_at is None:
            self._first(entry, now)
            entry.last_token_at = now

    def _first(self, entry: Entry, now: float) -> None:
        entry.first_token_at = now
        if self.prefill is not None:
            self.prefill[entry.lane].first_token(entry.prompt_tokens, now)
        assert entry.dispatched_at is not None  # running
        self.first_tokens.first_token(
            entry.lane, entry.prompt_tokens, entry.ahead, now - entry.dispatched_at
        )

    def mark(self, request_id: str, stage: str, now: float) -> None:
        """A TTFT stage of a started request ended: ``"schedule"`` (the engine
        started the request) or ``"prefill"`` (the engine produced the first
        token). With both marked, TTFT splits into queue, schedule, prefill and
        transfer in :attr:`Finished.stages`."""
        if stage not in ("schedule", "prefill"):
            raise UsageError(f"stage must be 'schedule' or 'prefill', not {stage!r}")
        entry = self._running_entry(request_id)
        now = self._advance(now)
        if entry.marks is None:
            entry.marks = {}
        entry.marks.setdefault(stage, now)

    def tokens(self, request_id: str, count: int, now: float) -> float | None:
        """``count`` more output tokens arrived (a chunk may carry several).

        Returns the gap since the previous chunk that carried tokens (seconds,
        the request's TBT: a chunk is one arrival however many tokens it
        carries), or ``None`` for its first chunk or a ``count`` of 0. A
        ``count`` that is not an int in ``[0, 2**53]`` raises
        :class:`UsageError` and changes nothing."""
        entry = self._running_entry(request_id)
        check_count("token count", count)
        now = self._advance(now)
        gap = None
        if entry.first_token_at is None:
            self._first(entry, now)
        elif count and entry.output_tokens and entry.last_token_at is not None:
            gap = now - entry.last_token_at
            self.health.gap(entry, gap, now)
        entry.last_token_at = now
        entry.output_tokens += count
        self._charge_output(entry)
        self.reservations.grow(entry, now)
        return gap

    def finish(
        self,
        request_id: str,
        now: float,
        outcome: Outcome | str = Outcome.COMPLETED,
        output_tokens: int | None = None,
    ) -> Finished:
        """End a started request: ``completed``, ``failed`` or ``cancelled``.

        ``output_tokens`` (the engine's own usage count) overrides the tokens
        reported so far. Releases its KV blocks and concurrency slots, charges
        the tenant the actual cost, and returns the record. Finishing a request
        twice, or one that never started, raises :class:`UsageError`; so does a
        bad argument (an ``output_tokens`` that is not an int in ``[0, 2**53]``,
        a bad ``now``), before anything changes: the request is still running
        and a later ``finish`` with good arguments releases it.
        """
        end = ending(outcome)
        entry = self._running_entry(request_id)
        if output_tokens is not None:
            check_count("output_tokens", output_tokens)
        now = self._advance(now)
        if output_tokens is not None:
            entry.output_tokens = output_tokens
        request = entry.request
        cost = self.router.estimator.score(
            entry.prompt_tokens, entry.output_tokens, request.tool_risk
        )
        self.kv._release(entry.id, now)
        if end is Outcome.COMPLETED:
            self.reservations.completed(entry)
        if entry.first_token_at is None:
            if self.prefill is not None:
                self.prefill[entry.lane].left(entry.prompt_tokens, now)
            self.first_tokens.left(entry.lane, entry.prompt_tokens)
        self._settle(entry, cost, now)
        if self.pace is not None:
            self.pace.settle(entry.cost, cost)
        self._charge_output(entry)
        self._running -= 1
        self.seats.give(entry.id)
        del self._entries[entry.id]
        self._outcomes[end] += 1
        self._turn_ended(entry, end, now)
        finished = entry.finished(end, now, cost)
        self.health.record(finished, now)
        return finished

    def _charge_output(self, entry: Entry) -> None:
        uncharged = entry.output_tokens - entry.charged_output
        if uncharged > 0:
            cost = self.router.estimator.weights.beta * uncharged
            self._queues._charge(entry.lane, entry.tenant, cost, entry.weight)
            entry.charged_output = entry.output_tokens

    def cancel(self, request_id: str, now: float) -> Finished:
        """Cancel a queued or running request (the client went away)."""
        entry = self._entries.get(request_id)
        if entry is None:
            raise UsageError(f"request {request_id!r} is not live")
        if entry.phase is Phase.RUNNING:
            return self.finish(request_id, now, Outcome.CANCELLED)
        now = self._advance(now)
        self._queues.remove(entry.lane, entry)
        return self._end_queued(entry, Outcome.CANCELLED, now)

    def _end_queued(self, entry: Entry, outcome: Outcome, now: float) -> Finished:
        # Nothing was served: the whole estimated cost goes back to the tenant.
        self._settle(entry, 0.0, now)
        del self._entries[entry.id]
        self._outcomes[outcome] += 1
        self._turn_ended(entry, outcome, now)
        finished = entry.finished(outcome, now, 0.0)
        if outcome is Outcome.REJECTED:  # displaced: a refusal to the SLO trackers
            self.health.record_rejected(entry.lane, entry.tenant, now)
        else:
            self.health.record(finished, now)
        return finished

    def _turn_ended(self, entry: Entry, outcome: Outcome, now: float) -> None:
        task = entry.request.task
        if task is not None:
            self._tasks_ended([self.tasks.turn_ended(task, entry.id, outcome, now)])

    def _tasks_ended(self, ended: Sequence[TaskEnded | None]) -> None:
        for task in ended:
            if task is not None:
                self.task_trackers.record(task)

    def _running_entry(self, request_id: str) -> Entry:
        entry = self._entries.get(request_id)
        if entry is None or entry.phase is not Phase.RUNNING:
            state = "not live" if entry is None else "still queued"
            raise UsageError(f"request {request_id!r} is {state}")
        return entry

    # -- health ---------------------------------------------------------------

    def observe(self, signals: EngineSignals, now: float) -> None:
        """Take the engine's latest signals (KV usage also reconciles the ledger)."""
        check_signals(signals)
        now = self._advance(now)
        self.health.observe(signals)
        if signals.kv_usage is not None:  # checked by EngineSignals
            self.kv._observe(signals.kv_usage, now)

    def evaluate(self, now: float) -> LadderEvent | None:
        """Move the fallback ladder if pressure says so (``dispatch`` also does
        this every ``evaluate_every`` seconds); the move made, if any."""
        now = self._advance(now)
        kv = self.kv.statistics()
        head = self._deadlines.oldest(self.health.watch_lane)
        oldest = 0.0 if head is None else now - head.arrival
        return self.health.evaluate(
            now, kv_ledger=kv.used_blocks / kv.num_blocks, oldest_wait=oldest
        )

    def overload(self) -> tuple[OverloadState, str]:
        """The overload state (normal, degraded, batch_paused, interactive_only) and why."""
        return self.health.overload()

    def diagnose(self, now: float) -> list[Finding]:
        """Likely causes of SLO trouble, with the numbers, most severe first."""
        return self.health.diagnose(self._advance(now))

    # -- introspection ------------------------------------------------------

    def phase(self, request_id: str) -> str | None:
        """``"queued"``, ``"running"``, or ``None`` once ended (or never submitted)."""
        entry = self._entries.get(request_id)
        return None if entry is None else entry.phase.value

    @property
    def running(self) -> int:
        """Requests dispatched and not yet finished."""
        return self._running

    @property
    def lanes(self) -> tuple[str, ...]:
        """The lane names, most urgent first (the router's order)."""
        return tuple(self._lanes)

    def quiet(self, now: float) -> bool:
        """Whether nothing is live and the watched lane's SLO windows hold no
        latency samples at ``now``: until the next submit, the ladder's inputs
        are the engine's signals alone. A read."""
        check_now(now)
        tracker = self.health.trackers.lane(self.health.watch_lane)
        return (
            not self._entries
            and tracker.quantile("ttft", 0.5, now) is None
            and tracker.quantile("queue_wait", 0.5, now) is None
        )

    @property
    def ladder_settle_time(self) -> float | None:
        """Seconds of constant ladder inputs after which the fallback ladder has
        made every move it will (at most ``top`` moves, each within
        ``max(dwell, cooldown)`` plus one evaluation period of the last), or
        ``None`` without a ladder."""
        ladder, every = self.health.ladder, self.health.evaluate_every
        if ladder is None:
            return None
        return ladder.top * (max(ladder.dwell, ladder.cooldown) + every) + every

    def statistics(self, now: float | None = None) -> PolicyStatistics:
        """A frozen snapshot of queues, running requests, outcomes and ledgers;
        time-dependent figures (the dispatch backlog) read at ``now`` (monotonic
        seconds; default and at least the latest ``now`` seen). A pure read; a
        bad ``now`` raises :class:`UsageError` as it does everywhere else."""
        if now is not None:
            check_now(now)
        at = self._now if now is None else max(now, self._now)
        state, _ = self.health.overload()
        ladder = self.health.ladder
        return PolicyStatistics(
            self._submitted,
            {name: len(self._queues.queue(name)) for name in self._lanes},
            self._running,
            dict(self._outcomes),
            self.kv.statistics(),
            self.quotas.statistics(),
            state,
            0 if ladder is None else ladder.level,
            None if self.pace is None else 0.0 if at == -math.inf else self.pace._backlog(at),
            self.health.tbt_p99(self._now),
        )

    def _advance(self, now: float) -> float:
        # The one check of ``now`` for every call: the components below are
        # passed the latest ``now`` seen, through their trusted (checked-input)
        # methods, so they need not check it again.
        check_now(now)
        if now > self._now:
            self._now = now
        return self._now


def _refuse(
    decision: Admit | Demote,
    reason: Reason,
    message: str,
    retry_after: float | None,
    http_status: int,
    rule: str,
) -> Decision:
    steps = (*decision.steps, Step(rule, decision.lane, message))
    lane, prompt = decision.lane, decision.prompt_tokens
    if http_status >= 500 or retry_after is not None or reason in _TRANSIENT:
        return Defer(reason, message, retry_after, http_status, lane, steps, prompt)
    return Reject(reason, message, http_status, lane, steps, prompt)


_TRANSIENT = frozenset({Reason.RATE_LIMITED, Reason.CONCURRENCY_LIMITED, Reason.QUEUE_FULL})
