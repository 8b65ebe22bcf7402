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

from collections.abc import Callable, Sequence

from slopolicy.core.checks import check_now
from slopolicy.core.cost.estimator import CostEstimator
from slopolicy.core.cost.tokens import TokenCounter
from slopolicy.core.decisions import Admit, Decision, Demote, Reason
from slopolicy.core.health.findings import Finding
from slopolicy.core.health.signals import EngineSignals, check_signals
from slopolicy.core.ladder.events import LadderEvent
from slopolicy.core.ladder.overload import OverloadState
from slopolicy.core.lifecycle import Dispatch, PolicyStatistics
from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.policy.dispatcher import Dispatcher
from slopolicy.core.policy.intake import Intake
from slopolicy.core.policy.parts import Parts
from slopolicy.core.policy.serving import Serving
from slopolicy.core.request import Request
from slopolicy.core.routing.rules import RoutingRule
from slopolicy.core.slo.tracker import CostModel
from slopolicy.core.slo.tracker_set import TrackerSet
from slopolicy.core.specs import PolicySource, PolicySpec, TierTable
from slopolicy.core.tasks.trackers import TaskTrackers
from slopolicy.errors import UsageError

__all__ = ("Policy",)


class Policy:
    """Admission, fair dispatch and exactly-once release for one engine.

    Build it from a ``PolicyConfig`` (``Policy(config)``) or a
    :class:`PolicySpec`. ``counter`` overrides the configured tokenizer,
    ``rules`` adds custom routing rules, ``compress`` is the ladder's
    prompt-compression hook, and ``cost_model`` prices finished requests for
    the cost-per-success figures (default: cost units).

    The work is done by collaborators sharing one :class:`~slopolicy.core.policy.book.Book`
    of live requests: the submit path (:class:`~slopolicy.core.policy.intake.Intake`),
    the dispatcher (:class:`~slopolicy.core.policy.dispatcher.Dispatcher`) and the
    running path (:class:`~slopolicy.core.policy.serving.Serving`); each public
    method checks its arguments and calls one of them.
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
        parts = Parts.build(spec, cost_model)
        self.router = parts.router
        #: Slots, rate limits and fair waiting for the host's tool calls.
        self.tools = parts.tools
        #: SLO trackers, engine signals and the fallback ladder.
        self.health = parts.health
        #: The KV block ledger.
        self.kv = parts.kv
        #: What running requests hold in the KV ledger: prompts plus forecast answers.
        self.reservations = parts.reservations
        #: Each tenant's token bucket and concurrency.
        self.quotas = parts.quotas
        self.max_running = spec.max_running
        #: The engine's running seats: one per sequence, lane caps and reserves.
        self.seats = parts.seats
        #: Paces starts to a rate in cost units per second, or ``None``.
        self.pace = parts.pace
        #: The engine's TTFT per lane, the prompts ahead of a start, and the
        #: prefill budget (``engine.prefill_horizon_s``) those prompts are held to.
        self.first_tokens = parts.first_tokens
        #: The decoding requests' slack against their lanes' TPOT targets, which
        #: a start's prefill must fit in, or ``None`` without TPOT targets.
        self.decode_pace = parts.decode_pace
        #: Agent tasks under way (requests with a ``task``), and how they ended.
        self.tasks = parts.tasks
        #: Each tenant's recent demand against its max-min share of what the
        #: engine serves (``engine.share_window_s``), or ``None`` without one.
        self.demand = parts.demand
        #: How fast ends free the KV pool's blocks (``engine.reclaim`` with a
        #: share window: reclaim revokes only where waiting on them makes a
        #: head late), or ``None``.
        self.turnover = parts.turnover
        #: The part of the recent past (decayed over ``engine.share_window_s``)
        #: the engine held a startable request back, or ``None`` without a window.
        self.saturation = parts.saturation
        self._queues = parts.queues
        # Deadlines, and each lane's oldest waiting request: the watched
        # lane's oldest one's age is a live queue-wait signal for the ladder.
        self._deadlines = parts.deadlines
        self._book = parts.book
        self._entries = parts.book.entries
        self._parts = parts
        self._intake = Intake(parts)
        self._serving = Serving(parts)
        self._dispatcher = Dispatcher(parts, self._serving)

    # -- submit -------------------------------------------------------------

    def submit(self, request: Request, *, now: float) -> Decision:
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
        return self._intake.submit(request, now=now)

    def prepare(self, request: Request, *, now: float) -> Decision:
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
        return self._intake.prepare(request, now=now)

    def enqueue(self, decision: Admit | Demote, *, now: float) -> Decision:
        """The second half of :meth:`submit`: queue a decision :meth:`prepare`
        accepted. Takes the tenant's quota from :attr:`quotas` unless the
        quota is delegated (:meth:`delegate_quota`). Returns ``decision``
        (with what it ``displaced`` from a full queue, as :meth:`submit`), or the
        refusal that replaced it."""
        return self._intake.enqueue(decision, now=now)

    def refuse(
        self,
        decision: Admit | Demote,
        reason: Reason,
        message: str,
        *,
        now: float,
        retry_after: float | None = None,
        http_status: int = 429,
    ) -> Decision:
        """Refuse a decision :meth:`prepare` accepted, for a cause found outside
        the policy (a shared quota store's refusal), instead of :meth:`enqueue`.

        Records the request as rejected and returns the ``Defer`` (503, a
        ``retry_after``, or a transient reason) or ``Reject`` to answer with;
        the decision's steps name the cause ``quota``."""
        return self._intake.refuse(
            decision, reason, message, now=now, retry_after=retry_after, http_status=http_status
        )

    def withdraw(self, decision: Admit | Demote, *, now: float) -> None:
        """A decision :meth:`prepare` accepted will not be enqueued after all:
        the caller went away (cancelled) before the quota store answered.
        Counted as ``cancelled``; nothing else was held."""
        self._intake.withdraw(decision, now=now)

    def delegate_quota(self) -> None:
        """Tenant quotas are taken and settled outside this policy from now on
        (a shared quota store: see :class:`~slopolicy.runtime.store_quota.StoreQuota`):
        :meth:`submit` and :meth:`enqueue` take none from :attr:`quotas`, and
        the caller settles its quota with the cost in each request's
        :class:`Finished` record. Only while nothing is live (else
        :class:`UsageError`); idempotent."""
        book = self._book
        if book.entries or book.prepared:
            raise UsageError("delegate the quota before any request is live")
        book.quota_delegated = True

    @property
    def quota_delegated(self) -> bool:
        """Whether tenant quotas are taken outside this policy (:meth:`delegate_quota`)."""
        return self._book.quota_delegated

    # -- dispatch -----------------------------------------------------------

    def dispatch(self, *, now: float, max_expired: int | None = None) -> Dispatch:
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
        return self._dispatcher.dispatch(now=now, max_expired=max_expired)

    def next_deadline(self) -> float | None:
        """The earliest deadline among queued requests (monotonic seconds), or
        ``None`` when nothing is queued: the next time :meth:`dispatch` has a
        request to expire. Amortized ``O(lanes)``."""
        return self._deadlines.next()

    def can_start(self, *, now: float) -> bool:
        """Whether a :meth:`dispatch` at ``now`` could start anything: an engine
        slot is free and the dispatch rate allows a start (queued heads, KV and
        paused lanes aside). A read."""
        check_now(now)
        return self._dispatcher.can_start(now=now)

    def next_start(self) -> float | None:
        """When the dispatch rate (``engine.dispatch_rate``) lets the next
        queued request start (monotonic seconds), if it is what holds it back
        now; ``None`` when it does not, with nothing queued, or with the
        engine full (a finish dispatches then). The prefill budget
        (``engine.prefill_horizon_s``) opens at a first token or an end,
        never at a time: dispatch after those. Call :meth:`dispatch` at that time."""
        return self._dispatcher.next_start()

    def next_wakeup(self, *, now: float) -> float | None:
        """When a :meth:`dispatch` next has work if no other call comes first
        (monotonic seconds, never before ``now`` or the latest ``now`` seen),
        as aioquic's ``get_timer()``: the earliest of the next queue deadline
        (:meth:`next_deadline`), the next paced start
        (:meth:`next_start`), the next ladder evaluation and, with
        ``engine.reclaim``, the next moment a head held for KV may need room
        taken back (its deadline comes within what the pool's ends take, or
        the demand estimate's next refresh) and, while the engine reports
        preemptions, the next first-token bound of a started request (a
        stalled start is revoked there) and, on a cold start before any first
        token is reported, the moment the prefill budget stops holding
        starts back for a host taken not to stream
        (:meth:`FirstTokenCheck.report_due
        <slopolicy.core.queueing.ttft.FirstTokenCheck.report_due>`);
        ``None`` when none is pending.
        Before then no timer is due, provided the caller dispatched after
        its last other call (as the Gate and the simulator do). Two reads
        move on their own clock with no timer: the give-up of a head whose
        first token can no longer come in time (its deadline expires it
        anyway) and the refresh of the tenants' KV shares, so a dispatch
        between wake-ups may still give a head up, start the one behind it,
        or start one a refresh lets through; the ladder's ticks (each second
        by default) bound how late a host that dispatches only at wake-ups
        acts on them. A read."""
        check_now(now)
        return self._dispatcher.next_wakeup(now=now)

    # -- running requests ---------------------------------------------------

    def first_token(self, request_id: str, *, now: float) -> None:
        """The first output token of a started request arrived."""
        self._serving.first_token(request_id, now=now)

    def mark(self, request_id: str, stage: str, *, now: float) -> None:
        """A TTFT stage of a started request ended: ``"schedule"`` (the engine
        started the request) or ``"prefill"`` (the engine produced the first
        token). With both marked, TTFT splits into queue, schedule, prefill and
        transfer in :attr:`Finished.stages`."""
        self._serving.mark(request_id, stage, now=now)

    def tokens(self, request_id: str, count: int, *, now: float) -> float | None:
        """``count`` more output tokens arrived (a chunk may carry several).

        Returns the gap since the previous chunk that carried tokens (seconds,
        the request's TBT: a chunk is one arrival however many tokens it
        carries), or ``None`` for its first chunk or a ``count`` of 0. A
        ``count`` that is not an int in ``[0, 2**53]`` raises
        :class:`UsageError` and changes nothing."""
        return self._serving.tokens(request_id, count, now=now)

    def finish(
        self,
        request_id: str,
        *,
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
        return self._serving.finish(
            request_id, now=now, outcome=outcome, output_tokens=output_tokens
        )

    def cancel(self, request_id: str, *, now: float) -> Finished:
        """Cancel a queued or running request (the client went away)."""
        return self._serving.cancel(request_id, now=now)

    # -- health ---------------------------------------------------------------

    def observe(self, signals: EngineSignals, *, now: float) -> None:
        """Take the engine's latest signals (KV usage also reconciles the
        ledger; the engine's KV pool is the one it counts, at most
        ``kv.num_blocks`` where the config sets that)."""
        check_signals(signals)
        now = self._book.advance(now=now)
        self.health.observe(signals)
        if signals.kv_capacity_tokens is not None:  # checked by EngineSignals
            self.kv.observe_capacity(signals.kv_capacity_tokens)
        if signals.kv_usage is not None:
            self.kv._observe(signals.kv_usage, now)

    def evaluate(self, *, now: float) -> LadderEvent | None:
        """Move the fallback ladder if pressure says so (``dispatch`` also does
        this every ``evaluate_every`` seconds); the move made, if any."""
        return self._dispatcher.evaluate(now=self._book.advance(now=now))

    def overload(self) -> tuple[OverloadState, str]:
        """The overload state (normal, degraded, batch_paused, interactive_only) and why."""
        return self.health.overload()

    def diagnose(self, *, now: float) -> list[Finding]:
        """Likely causes of SLO trouble, with the numbers, most severe first."""
        return self.health.diagnose(now=self._book.advance(now=now))

    # -- introspection ------------------------------------------------------

    def phase(self, request_id: str) -> str | None:
        """``"queued"``, ``"running"``, or ``None`` once ended (or never submitted)."""
        entry = self._entries.get(request_id)
        return None if entry is None else entry.phase.value

    @property
    def running(self) -> int:
        """Requests dispatched and not yet finished."""
        return self._book.running

    @property
    def lanes(self) -> tuple[str, ...]:
        """The lane names, most urgent first (the router's order)."""
        return tuple(lane.name for lane in self.router.lanes)

    @property
    def task_trackers(self) -> TaskTrackers:
        """The task SLO trackers: each lane's and tenant's ended tasks."""
        return self._book.task_trackers

    @property
    def slo_trackers(self) -> TrackerSet:
        """The SLO trackers: each lane's and tenant's finished requests."""
        return self.health.trackers

    @property
    def estimator(self) -> CostEstimator:
        """What counts prompts and prices requests in cost units (its ``weights``)."""
        return self.router.estimator

    @property
    def tiers(self) -> TierTable:
        """The tiers by name, and which tier each known tenant has."""
        return self.router.tiers

    @property
    def _now(self) -> float:
        """The latest ``now`` seen (monotonic seconds; ``-inf`` before any)."""
        return self._book.now

    def quiet(self, *, now: float) -> bool:
        """Whether nothing is live and the watched lane's SLO windows hold no
        latency samples at ``now``: until the next submit, the ladder's inputs
        are the engine's signals alone. A read."""
        check_now(now)
        tracker = self.health.trackers.lane(self.health.watch_lane)
        return (
            not self._entries
            and tracker.quantile("ttft", 0.5, now=now) is None
            and tracker.quantile("queue_wait", 0.5, now=now) is None
        )

    @property
    def ladder_settle_time(self) -> float | None:
        """Seconds of constant ladder inputs after which the fallback ladder has
        made every move it will, or ``None`` without a ladder (see
        :attr:`Health.settle_time <slopolicy.core.health.health.Health.settle_time>`)."""
        return self.health.settle_time

    def statistics(self, *, now: float | None = None) -> PolicyStatistics:
        """A frozen snapshot of queues, running requests, outcomes and ledgers;
        time-dependent figures (the dispatch backlog, the engine's saturation)
        read at ``now`` (monotonic seconds; default and at least the latest
        ``now`` seen). A pure read; a bad ``now`` raises :class:`UsageError` as
        it does everywhere else."""
        if now is not None:
            check_now(now)
        book = self._book
        return self._parts.statistics(book.now if now is None else max(now, book.now))
