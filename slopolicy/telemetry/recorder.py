"""One gate's recorder: the calls a :class:`~slopolicy.Gate` makes as events happen.

A decision at submit, a dispatch, each gap between chunks of a stream, a
request's end, a tool call's, an agent task's end, and, while the gate is
open, the task that serves the observable gauges. Everything is recorded
through ``opentelemetry-api``; nothing here sets a global provider.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Final

import anyio
from anyio.abc import TaskStatus
from opentelemetry.trace import Span

from slopolicy.core.decisions import Admit, Decision, Defer, Demote, Reject
from slopolicy.core.lifecycle import Dispatch
from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.policy import Policy
from slopolicy.core.request import Request
from slopolicy.core.tasks.records import TaskEnded
from slopolicy.core.tools.calls import ToolLease, ToolOutcome, ToolRefused
from slopolicy.telemetry import names as n
from slopolicy.telemetry import spans
from slopolicy.telemetry.attributes import LaneSets, ModelSets, TenantSets
from slopolicy.telemetry.gauge_source import GaugeSource

if TYPE_CHECKING:
    from slopolicy.telemetry.config import Telemetry

__all__ = ("Recorder",)

_KIND: Final = {Admit: "admit", Demote: "demote", Defer: "defer", Reject: "reject"}


class _Flight:
    """What the recorder keeps about one accepted request until it ends: its
    span, its clocks, the attribute sets it records with and its lane's stall
    threshold (seconds)."""

    __slots__ = ("active", "lane", "model", "span", "stall_s", "start", "start_ns", "tenant")

    def __init__(
        self,
        span: Span | None,
        start: float,
        start_ns: int,
        lane: LaneSets,
        tenant: TenantSets,
        model: ModelSets,
        stall_s: float,
    ) -> None:
        self.span = span
        self.start = start  # the gate's clock at submit
        self.start_ns = start_ns  # the wall clock at submit, for span timestamps
        self.lane = lane
        self.tenant = tenant
        self.model = model
        self.stall_s = stall_s
        self.active = False  # counted in slopolicy.active_requests

    def ns(self, at: float) -> int:
        """Span time of ``at`` on the gate's clock."""
        return self.start_ns + round((at - self.start) * 1e9)


class Recorder:
    """One gate's telemetry, made by :meth:`Telemetry.bind`. The gate calls
    :meth:`submitted`, :meth:`dispatched`, :meth:`gap` and :meth:`ended` as events happen
    (on its event loop; none awaits) and runs :meth:`watch` while open.

    The observable gauges read the policy on the gate's own thread when a
    reader collects there (an in-process ``/metrics`` handler, a test). A
    reader collecting from another thread (the SDK's periodic reader, the
    Prometheus HTTP server) gets the readings :meth:`watch` takes every
    ``refresh_every`` seconds once such a reader has asked, never the live
    policy, which only its loop may touch; the first such collection finds
    nothing.
    """

    __slots__ = (
        "_flights",
        "_instruments",
        "_policy",
        "_sets",
        "_stall_s",
        "_telemetry",
        "_tracer",
    )

    def __init__(self, telemetry: Telemetry, policy: Policy) -> None:
        self._telemetry = telemetry
        self._policy = policy
        self._instruments = telemetry.instruments
        self._sets = telemetry.sets
        self._tracer = telemetry.tracer
        self._flights: dict[str, _Flight] = {}
        trackers = policy.slo_trackers
        self._stall_s = {
            lane: trackers.lane(lane).targets.stall_threshold for lane in trackers.lanes
        }

    @property
    def in_flight(self) -> int:
        """Requests accepted and not yet ended (what the recorder holds)."""
        return len(self._flights)

    def submitted(self, request: Request, decision: Decision, now: float) -> None:
        """``request`` was decided at ``now`` (the gate's clock, monotonic seconds)."""
        telemetry = self._telemetry
        if not telemetry.listening():
            return
        sets = self._sets
        instruments = self._instruments
        tenant = telemetry.tenants.label(request.tenant)
        kind = _KIND[type(decision)]
        lane = decision.lane
        reason = decision.reason.value
        instruments.admissions.add(1, sets.admission(kind, reason, lane, tenant))
        lane_sets = sets.lane(lane)
        # The router's count, carried by every decision made after it
        # counted; never counted again here (shedding must stay cheap).
        prompt = decision.prompt_tokens
        if prompt is None:
            prompt = request.prompt_tokens
        if prompt is not None:
            instruments.prompt_tokens.record(prompt, lane_sets.prompt[kind])
        operation = telemetry.operation or (
            "chat" if request.messages is not None else "text_completion"
        )
        start_ns = time.time_ns()
        span = spans.start(self._tracer, request, decision, kind, operation, sets.base, start_ns)
        tenant_sets = sets.tenant(lane, tenant)
        if not isinstance(decision, (Admit, Demote)):
            instruments.outcomes.add(1, tenant_sets.outcomes[Outcome.REJECTED])
            if span is not None:
                spans.refused(span, decision, prompt, start_ns)
            return
        for rung in decision.rungs:
            instruments.applied.add(1, sets.applied(rung, decision.lane))
        model = decision.request.model
        if model is not None:
            model = telemetry.models.label(model)
        model_sets = sets.model(operation, model, decision.lane)
        stall_s = self._stall_s.get(decision.lane, math.inf)
        self._flights[request.id] = _Flight(
            span, now, start_ns, lane_sets, tenant_sets, model_sets, stall_s
        )

    def dispatched(self, result: Dispatch, now: float) -> None:
        """The policy dispatched at ``now``: requests started, and the ladder may have moved."""
        event = result.ladder
        if event is not None:
            attrs = self._sets.transition(event.rung, event.direction.value, event.cause.value)
            self._instruments.transitions.add(1, attrs)
        if not result.started:
            return
        instruments = self._instruments
        flights = self._flights
        for started in result.started:
            flight = flights.get(started.id)
            if flight is None:
                continue
            instruments.queue_wait.record(started.queue_wait, flight.lane.dispatched)
            instruments.active.add(1, flight.tenant.active)
            flight.active = True
            if flight.span is not None:
                spans.dispatched(flight.span, started, flight.ns(now))

    def gap(self, request_id: str, gap: float) -> None:
        """A gap of ``gap`` seconds between two chunks of ``request_id``'s stream
        (what ``Policy.tokens`` returned): the TBT histogram, and the stall
        counter when it is at least the lane's stall threshold."""
        flight = self._flights.get(request_id)
        if flight is None:
            return
        attrs = flight.lane.lane
        self._instruments.tbt.record(gap, attrs)
        if gap >= flight.stall_s:
            self._instruments.stalls.add(1, attrs)

    def ended(self, finished: Finished, error: BaseException | None = None) -> None:
        """An accepted request ended; ``error`` is what failed it, if known."""
        flight = self._flights.pop(finished.id, None)
        if flight is None:
            return
        instruments = self._instruments
        outcome = finished.outcome
        lane, model = flight.lane, flight.model
        instruments.outcomes.add(1, flight.tenant.outcomes[outcome])
        completed = outcome is Outcome.COMPLETED
        error_type = None if completed else _error_type(outcome, error)
        genai = model.completed if error_type is None else model.failed(error_type)
        instruments.duration.record(finished.e2e, genai)
        if finished.queue_wait is None:  # it never left the queue: expired or cancelled there
            instruments.queue_wait.record(finished.e2e, lane.left[outcome, finished.held_by])
        else:
            if flight.active:
                instruments.active.add(-1, flight.tenant.active)
            usage = instruments.token_usage.record
            usage(finished.prompt_tokens, model.input)
            usage(finished.output_tokens, model.output)
            instruments.output_tokens.record(finished.output_tokens, lane.output[outcome])
            self._phases(finished, lane)
            ttft = finished.ttft
            if completed and ttft is not None:
                instruments.ttft.record(ttft, genai)
                if finished.output_tokens > 1 and finished.tpot is not None:
                    instruments.tpot.record(finished.tpot, genai)
        span = flight.span
        if span is not None:
            first = None if finished.ttft is None else flight.ns(finished.arrival + finished.ttft)
            spans.ended(span, finished, error, error_type, flight.ns(finished.finished_at), first)

    def _phases(self, finished: Finished, lane: LaneSets) -> None:
        """Engine time by phase. Prefill is exact when the host marks it;
        otherwise it is the rest of the time to the first token (or to the
        end, when none came) after queueing and scheduling."""
        record = self._instruments.phase.record
        phase = lane.phase
        stages = finished.stages
        schedule = stages.get("schedule")
        if schedule is not None:
            record(schedule, phase["schedule"])
        transfer = stages.get("transfer")
        if transfer is not None:
            record(transfer, phase["transfer"])
        prefill = stages.get("prefill")
        ttft = finished.ttft
        if prefill is None:
            assert finished.queue_wait is not None  # only dispatched requests get here
            until = finished.e2e if ttft is None else ttft
            prefill = until - finished.queue_wait - (schedule or 0.0) - (transfer or 0.0)
        record(max(prefill, 0.0), phase["prefill"])
        if ttft is not None:
            record(finished.e2e - ttft, phase["decode"])

    def tool_started(self, lease: ToolLease) -> None:
        """A tool call got its slot after waiting ``lease.wait`` seconds."""
        telemetry = self._telemetry
        if telemetry.listening():
            attrs = self._sets.tool(lease.group, telemetry.tenants.label(lease.tenant))
            self._instruments.tool_wait.record(lease.wait, attrs)

    def tool_ended(self, lease: ToolLease, outcome: ToolOutcome, now: float) -> None:
        """A tool call gave its slot back at ``now`` (the gate's clock)."""
        telemetry = self._telemetry
        if telemetry.listening():
            tenant = telemetry.tenants.label(lease.tenant)
            attrs = self._sets.tool(lease.group, tenant, outcome.value)
            self._instruments.tool_duration.record(now - lease.started_at, attrs)
            self._instruments.tool_calls.add(1, attrs)

    def tool_refused(self, refused: ToolRefused, group: str | None) -> None:
        """A tool call was refused; ``group`` is its configured name (``None``: unknown)."""
        telemetry = self._telemetry
        if telemetry.listening():
            tenant = telemetry.tenants.label(refused.tenant)
            tool = n.OTHER if group is None else group
            self._instruments.tool_calls.add(1, self._sets.tool(tool, tenant, refused.reason.value))

    def task_ended(self, ended: TaskEnded) -> None:
        """An agent task ended (the policy's task trackers hand it on): its
        end-to-end time, by lane, tenant label and outcome. The tenant label
        is looked up, not counted: tenants are ranked by requests."""
        telemetry = self._telemetry
        if telemetry.listening():
            tenant = telemetry.tenants.peek(ended.tenant)
            attrs = self._sets.task(ended.lane, tenant, ended.outcome.value)
            self._instruments.task_duration.record(max(0.0, ended.e2e), attrs)

    async def watch(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve the gauges, and count ended tasks, while the gate is open (the
        gate runs this as a task)."""
        source = GaugeSource(self._policy, self._telemetry.attributes)
        instruments = self._instruments
        instruments.attach(source)
        stop = self._policy.task_trackers.listen(self.task_ended)
        try:
            task_status.started()
            every = self._telemetry.refresh_every
            while True:
                await anyio.sleep(every)
                if source.observed:
                    source.publish(anyio.current_time())
        finally:
            stop()
            instruments.detach(source)


def _error_type(outcome: Outcome, error: BaseException | None) -> str:
    """``error.type``: the exception's qualified class name for a failure,
    ``_OTHER`` for one with no exception, else the outcome (cancelled, expired)."""
    if outcome is not Outcome.FAILED:
        return str(outcome.value)
    if error is None:
        return n.OTHER_ERROR
    cls = type(error)
    module: str = cls.__module__
    name: str = cls.__qualname__
    return name if module == "builtins" else f"{module}.{name}"
