"""The submit path of a :class:`~slopolicy.core.policy.Policy`.

Route, apply the fallback ladder, then queue: check the KV capacity, the
request's task, the tenant's quota and the lane's queue (a full queue makes
room by pushing out a tenant over its share). Split in two for a shared quota
store: :meth:`Intake.prepare` routes, and the accepted decision then gets
exactly one of :meth:`~Intake.enqueue`, :meth:`~Intake.refuse` or
:meth:`~Intake.withdraw`.
"""

from __future__ import annotations

import dataclasses

from slopolicy.core.decisions import Admit, Decision, Defer, Demote, Displaced, Reason, Reject, Step
from slopolicy.core.ladder.events import LadderVerdict
from slopolicy.core.ladder.ladder import FallbackLadder
from slopolicy.core.ladder.rungs import AdmissionAction
from slopolicy.core.lifecycle import Entry
from slopolicy.core.outcome import Outcome
from slopolicy.core.policy.parts import Parts
from slopolicy.core.queueing.saturation import SATURATED
from slopolicy.core.request import Request
from slopolicy.core.specs import LaneSpec, TaskSLO
from slopolicy.errors import UsageError

__all__ = ("Intake",)


class Intake:
    """Submits requests into a policy's book and lane queues (see the module)."""

    __slots__ = (
        "_book",
        "_deadlines",
        "_demand",
        "_health",
        "_interference",
        "_kv",
        "_lanes",
        "_queues",
        "_quotas",
        "_reservations",
        "_router",
        "_saturation",
        "_slo_bounds",
        "_spared",
        "_task_slos",
        "_tasks",
    )

    def __init__(self, parts: Parts) -> None:
        self._book = parts.book
        self._router = parts.router
        self._health = parts.health
        self._interference = parts.interference
        self._demand = parts.demand
        self._saturation = parts.saturation
        self._kv = parts.kv
        self._reservations = parts.reservations
        self._quotas = parts.quotas
        self._queues = parts.queues
        self._deadlines = parts.deadlines
        self._tasks = parts.tasks
        self._slo_bounds = parts.slo_bounds
        self._lanes = {lane.name: lane for lane in parts.router.lanes}
        ladder = parts.health.ladder
        #: Lanes no rung sheds: their demand counts toward a tenant's share
        #: and shedding takes the tenant's excess from its other lanes.
        self._spared = frozenset(
            name for name in self._lanes if ladder is None or not ladder.may_shed(name)
        )
        self._task_slos: dict[str, TaskSLO | None] = {
            lane.name: lane.task for lane in parts.router.lanes
        }

    def submit(self, request: Request, *, now: float) -> Decision:
        """:meth:`prepare` then :meth:`enqueue`, in one call."""
        decision = self._route(request, now)
        if isinstance(decision, (Admit, Demote)):
            decision = self._admit(decision, self._book.now)
        return decision

    def prepare(self, request: Request, *, now: float) -> Decision:
        """Route ``request``; an accepted decision awaits its one outcome."""
        decision = self._route(request, now)
        if isinstance(decision, (Admit, Demote)):
            self._book.prepared.add(request.id)
        return decision

    def enqueue(self, decision: Admit | Demote, *, now: float) -> Decision:
        """Queue a prepared decision, or return the refusal that replaced it."""
        now = self._book.advance(now=now)
        self._resolve(decision)
        return self._admit(decision, now)

    def refuse(
        self,
        decision: Admit | Demote,
        reason: Reason,
        message: str,
        *,
        now: float,
        retry_after: float | None,
        http_status: int,
    ) -> Decision:
        """Refuse a prepared decision for a cause the quota store found."""
        now = self._book.advance(now=now)
        self._resolve(decision)
        result = refusal(decision, reason, message, retry_after, http_status, "quota")
        self._book.rejected(result, decision.request.tenant, now=now)
        return result

    def withdraw(self, decision: Admit | Demote, *, now: float) -> None:
        """A prepared decision's caller went away: counted as cancelled."""
        book = self._book
        book.advance(now=now)
        self._resolve(decision)
        book.outcomes[Outcome.CANCELLED] += 1

    def _route(self, request: Request, now: float) -> Decision:
        """:meth:`prepare` without registering the accepted decision."""
        book = self._book
        now = book.advance(now=now)
        if request.id in book.entries or request.id in book.prepared:
            raise UsageError(f"request id {request.id!r} is already live")
        book.submitted += 1
        decision = self._router.route(request)
        if isinstance(decision, (Admit, Demote)):
            decision = self._degrade(decision, now)
        if not decision.accepted:
            book.rejected(decision, request.tenant, now=now)
        return decision

    def _resolve(self, decision: Admit | Demote) -> None:
        """Give a prepared decision its one outcome (validated, then recorded)."""
        request_id = decision.request.id
        prepared = self._book.prepared
        if request_id not in prepared:
            raise UsageError(
                f"request {request_id!r} has no prepared decision awaiting an outcome "
                "(never prepared, or already enqueued, refused or withdrawn)"
            )
        prepared.remove(request_id)

    def _admit(self, decision: Admit | Demote, now: float) -> Decision:
        """:meth:`enqueue` once ``now`` is advanced and the id is known not live."""
        result = self._enqueue(decision, now)
        if not result.accepted:
            self._book.rejected(result, decision.request.tenant, now=now)
        return result

    def _degrade(self, decision: Admit | Demote, now: float) -> Decision:
        """Apply the fallback ladder's active rungs to an accepted decision."""
        ladder = self._health.ladder
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
                reason=Reason.OVERLOAD_SHED,
                message=message,
                retry_after=None,
                http_status=503,
                lane=lane,
                steps=steps,
                prompt_tokens=decision.prompt_tokens,
            )
        demand, tenant = self._demand, decision.request.tenant
        verdict = self._ladder_verdict(decision, ladder, now)
        if verdict is not None and verdict.action is AdmissionAction.SHED:
            message = verdict.message
            if demand is not None:
                message = f"{message}: tenant {tenant!r} asks for more than its fair share"
            steps = (*decision.steps, Step("fallback", lane, message))
            return Defer(
                reason=Reason.OVERLOAD_SHED,
                message=message,
                retry_after=verdict.retry_after,
                http_status=503,
                lane=lane,
                steps=steps,
                prompt_tokens=decision.prompt_tokens,
            )
        degraded, applied = ladder.apply(decision.request, lane)
        if not applied:
            return decision
        cost = self._router.estimator.score(
            decision.prompt_tokens, degraded.output_budget, degraded.tool_risk
        )
        steps = (
            *decision.steps,
            *(Step("fallback", lane, "rung {} applied", (name,)) for name in applied),
        )
        return dataclasses.replace(
            decision, request=degraded, cost=cost, steps=steps, rungs=applied
        )

    def _ladder_verdict(
        self, decision: Admit | Demote, ladder: FallbackLadder, now: float
    ) -> LadderVerdict | None:
        """The ladder's admission verdict on an accepted decision, by share.

        Over-share tenants absorb the shedding: of each, the part of its
        requests beyond its max-min share is refused; what a tenant within
        its share asks goes on to queue (it fits what the engine serves). The
        ``shed`` rung does this once active. Before it, from the first level
        of pressure, the same refusal protects the tenants within their
        share wherever there are some, while the engine is saturated (it
        held work back for at least :data:`SATURATED` of the recent time):
        an over-share tenant's excess goes before any rung degrades anyone.
        A lone tenant, or tenants all over their share, wait for the rung;
        so does everyone on an engine that is busy but keeps up (pressure
        read on a pool forecast near full, with nothing held back)."""
        lane, demand, saturation = decision.lane, self._demand, self._saturation
        if demand is None or saturation is None:
            return ladder.admission(lane)
        active = ladder.sheds(lane)
        protect = (
            not active
            and ladder.may_shed(lane)
            and saturation._fraction(now) >= SATURATED
            and demand._protects(now)
        )
        refused = False
        if active or protect:
            tier = self._router.tiers.get(decision.tier)
            assert tier is not None  # the router only names tiers it knows
            request = decision.request
            output = self._reservations.forecast(
                lane, request.max_new_tokens, tenant=request.tenant
            )
            cost = self._share_cost(request, decision.prompt_tokens, output=output)
            refused = demand._sheds(request.tenant, cost, tier.weight, now)
        if protect and refused:
            return ladder.protection(lane)
        return ladder.admission(lane, shed=refused)

    def _share_cost(self, request: Request, prompt_tokens: int, *, output: int) -> float:
        """``request``'s cost at ``output``, its forecast answer per sequence
        (``Reservations.forecast``): what the tenants' shares count. A ceiling
        is not a length: counted at ``max_new_tokens``, a client that sends a
        32k ceiling for answers of 2k would read as asking sixteen times more."""
        return self._router.estimator.score(
            prompt_tokens, output * request.sequences, request.tool_risk
        )

    def _enqueue(self, decision: Admit | Demote, now: float) -> Decision:
        lane = self._lanes[decision.lane]
        request = decision.request
        # The request's counts were checked when it was made.
        reservations, prompt = self._reservations, decision.prompt_tokens
        worst = reservations.blocks_for(prompt, request.max_new_tokens, request.sequences)
        most = self._kv.capacity_blocks(lane.name)
        if worst > most:
            message = f"needs {worst:,} KV blocks; lane {lane.name!r} can hold at most {most:,}"
            return refusal(decision, Reason.PROMPT_TOO_LONG, message, None, 413, "kv capacity")
        # Under saturation a request of a tenant asking for more than its
        # max-min share is worth the part of its demand within the share: the
        # harm its prefill may do to the others is bounded by as much less.
        # Read for every request, as the other reads of the share do: the
        # first read past each twentieth of ``share_window_s`` recomputes the
        # level, from the sums as they are then.
        demand = self._demand
        worth = 1.0 if demand is None else demand._portion(request.tenant, now)
        harm = self._interference.refuses(lane.name, prompt, now, worth=worth)
        if harm is not None:
            allows = f"lane {lane.name!r} allows {lane.max_interference:g}"
            if worth < 1.0:
                allows = (
                    f"{allows}, times {worth:.2f} for tenant {request.tenant!r}, "
                    "which asks for more than its fair share"
                )
            message = (
                f"its {prompt:,}-token prefill would hold the engine long enough to make about "
                f"{harm:.1f} requests of the more urgent lanes miss their TTFT target ({allows})"
            )
            return refusal(
                decision,
                Reason.PREFILL_INTERFERENCE,
                message,
                lane.defer_retry_after,
                503,
                "interference",
            )
        needed, reserved_output = reservations.plan(
            lane.name,
            prompt,
            request.max_new_tokens,
            request.sequences,
            tenant=request.tenant,
            worst=worst,
        )
        deadline = lane_deadline = now + lane.max_queue_wait
        bound = self._slo_bounds.get(lane.name)
        if bound is not None and now + bound < deadline:
            deadline = now + bound  # past it the request can only miss
        book, tasks = self._book, self._tasks
        task, task_slo = request.task, self._task_slos[lane.name]
        if task is not None:
            # The pace a turn goes at now: the lane's median turn, end to end.
            pace = self._health.trackers.lane(lane.name).quantile("e2e", 0.5, now=now)
            told = tasks.check(task, request.tenant, lane.name, task_slo, now=now, turn_time=pace)
            if told is not None:
                if told.reason is Reason.TASK_DEADLINE_LOST:
                    book.tasks_ended([tasks.lost(task, now=now)])
                return refusal(decision, told.reason, told.message, None, told.http_status, "task")
            task_deadline = tasks.deadline(task, task_slo, now=now)
            if task_deadline is not None and task_deadline < deadline:
                deadline = task_deadline  # a turn started past it cannot complete its task
        tier = self._router.tiers.get(decision.tier)
        assert tier is not None  # the router only names tiers it knows
        if not book.quota_delegated:
            refused = self._quotas._grant(request.tenant, tier, lane.name, decision.cost, now)
            if refused is not None:
                return refusal(
                    decision,
                    refused.reason,
                    refused.message,
                    refused.retry_after,
                    refused.http_status,
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
        entry.share_cost = self._share_cost(request, prompt, output=reserved_output)
        queues, key = self._queues, lane.queue_key(entry.prompt_tokens)
        # Under saturation, a tenant asking for more than its max-min share
        # goes after those within theirs (inside the lane's slack).
        demand = self._demand
        spared = lane.name in self._spared
        behind = demand is not None and demand._offer(
            request.tenant, entry.share_cost, tier.weight, now, spared
        )
        if not queues._push(lane.name, entry, request.tenant, tier.weight, key=key, behind=behind):
            # Full: room is made only from a tenant holding more than its share.
            victim = queues._displaced(lane.name, request.tenant, tier.weight)
            if victim is None:
                book.settle(entry, 0.0, now=now)
                message = (
                    f"lane {lane.name!r} queue is full ({lane.queue_capacity:,} waiting) "
                    f"and tenant {request.tenant!r} already has its share of it"
                )
                return refusal(
                    decision, Reason.QUEUE_FULL, message, lane.max_queue_wait, 503, "queue"
                )
            queues.remove(lane.name, victim)
            displaced = self._displace(victim, lane, now)
            queues._push(lane.name, entry, request.tenant, tier.weight, key=key, behind=behind)
            decision = dataclasses.replace(decision, displaced=displaced)
        book.entries[request.id] = entry
        self._deadlines.add(entry, lane_deadline)
        self._interference.arrived(lane.name, now)
        if task is not None:
            book.tasks_ended(
                tasks.admitted(task, request.id, request.tenant, lane.name, task_slo, now=now)
            )
        return decision

    def _displace(self, entry: Entry, lane: LaneSpec, now: float) -> Displaced:
        """End ``entry``, just pushed out of ``lane``'s full queue, as refused."""
        message = (
            f"pushed out of lane {lane.name!r}'s full queue ({lane.queue_capacity:,} waiting) "
            f"by a tenant with fewer waiting: tenant {entry.tenant!r} had the most per unit weight"
        )
        step = Step("queue", lane.name, message)
        refused = Defer(
            reason=Reason.QUEUE_FULL,
            message=message,
            retry_after=lane.max_queue_wait,
            http_status=503,
            lane=lane.name,
            steps=(step,),
        )
        return Displaced(
            finished=self._book.end_queued(entry, Outcome.REJECTED, now=now), refusal=refused
        )


def refusal(
    decision: Admit | Demote,
    reason: Reason,
    message: str,
    retry_after: float | None,
    http_status: int,
    rule: str,
) -> Decision:
    """Refuse an accepted ``decision`` by ``rule``: a ``Defer`` when the cause
    may pass (a 5xx status, a ``retry_after``, a transient reason), else a
    ``Reject``; its steps end with the rule's."""
    steps = (*decision.steps, Step(rule, decision.lane, message))
    lane, prompt = decision.lane, decision.prompt_tokens
    if http_status >= 500 or retry_after is not None or reason in _TRANSIENT:
        return Defer(
            reason=reason,
            message=message,
            retry_after=retry_after,
            http_status=http_status,
            lane=lane,
            steps=steps,
            prompt_tokens=prompt,
        )
    return Reject(
        reason=reason,
        message=message,
        http_status=http_status,
        lane=lane,
        steps=steps,
        prompt_tokens=prompt,
    )


_TRANSIENT = frozenset({Reason.RATE_LIMITED, Reason.CONCURRENCY_LIMITED, Reason.QUEUE_FULL})
