"""The discrete-event loop: a workload, a scheduler and the engine model in virtual time.

Three sources of events, taken in time order: arrivals (``submit``), the
engine's iterations (first tokens, finishes, preemptions) and the scheduler's
own timers (``wakeup``: ladder ticks, queue deadlines). A request the scheduler
revokes while it runs is aborted on the engine and refused, retryably. After any event that
can change what may start (an arrival, a finish, a preemption, the engine
starting requests from its queue, a timer), the scheduler's ``dispatch`` runs
with the run's :class:`~slopolicy.sim.view.EngineView` and what it releases
joins the engine's queue; an idle engine then starts its next
iteration, or a run of pure-decode iterations up to the next known event
(see :mod:`slopolicy.sim.engine`). Output tokens reach the scheduler at the
first engine boundary after each ``report_every`` seconds and at finish.

Agent tasks run closed loop: a task's later turn is held back until the turn
before it completed, then sent ``tool_wait`` seconds later (the tool calls
in between) with that time as its arrival. A turn that does not complete
ends its task: the turns after it are never sent (and have no record).

Deterministic: the same inputs give the same records, and nothing reads the
wall clock (``progress`` is told the fraction of arrivals processed).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from slopolicy.core.slo.targets import SLOTargets
from slopolicy.errors import UsageError
from slopolicy.sim.engine import EngineSpec, EngineStatistics
from slopolicy.sim.gaps import TBTSummary
from slopolicy.sim.interface import Scheduler, SimAdmission
from slopolicy.sim.llama_engine import make_engine
from slopolicy.sim.records import RequestRecord, SimOutcome
from slopolicy.sim.view import EngineView
from slopolicy.sim.workload import SimRequest, Workload

__all__ = ("SimulationResult", "simulate")

#: Called with the fraction (0-1) of the workload's arrivals processed so far.
Progress = Callable[[float], None]


@dataclass(frozen=True, slots=True)
class Client:
    """How clients come back after a retryable refusal (429/503), as the
    openai SDK does: after ``Retry-After`` when the answer gives one of at most
    ``max_retry_after`` seconds, else after ``backoff·2**n`` seconds (``n`` the
    retries so far) capped at ``max_backoff`` and shortened by a random
    ``jitter`` fraction (up to 25%). The jitter comes from a generator seeded
    with ``seed``, so runs repeat. A request retries at most its own
    ``retries`` times."""

    backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    jitter: float = 0.25
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("backoff", "max_backoff", "max_retry_after"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise UsageError(f"{name} must be a finite number of seconds > 0")
        if not 0 <= self.jitter < 1:
            raise UsageError(f"jitter must be in [0, 1), got {self.jitter!r}")

    def delay(self, retried: int, retry_after: float | None, draw: float) -> float:
        """Seconds before the next attempt, after ``retried`` retries so far;
        ``draw`` is a uniform random number in [0, 1)."""
        if retry_after is not None and 0 < retry_after <= self.max_retry_after:
            return retry_after
        try:
            grown = self.backoff * 2.0**retried
        except OverflowError:  # past a thousand retries: capped like any long backoff
            grown = math.inf
        return min(grown, self.max_backoff) * (1 - self.jitter * draw)


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """One scheduler's run over one workload.

    ``records`` follow the workload's order; ``end`` is the simulated time the
    run stopped (the last event, or ``duration + drain``); ``engine`` holds the
    engine's counters and ``tbt`` each lane's token gaps.
    """

    scheduler: str
    records: tuple[RequestRecord, ...]
    duration: float
    end: float
    engine: EngineStatistics
    tbt: Mapping[str, TBTSummary] = field(default_factory=dict)


class _Live:
    __slots__ = (
        "attempts",
        "dispatched",
        "finished",
        "first",
        "held_by",
        "lane",
        "max_new",
        "model",
        "outcome",
        "output",
        "preemptions",
        "reason",
        "reported",
        "request",
        "slow_gaps",
    )

    def __init__(self, request: SimRequest, lane: str, reason: str) -> None:
        self.request = request
        self.lane = lane
        self.reason = reason
        self.outcome = SimOutcome.UNFINISHED
        self.dispatched: float | None = None
        self.first: float | None = None
        self.finished: float | None = None
        self.output = 0
        self.reported = 0
        self.max_new: int | None = None
        self.model: str | None = None
        self.preemptions = 0
        self.attempts = 1
        self.slow_gaps = 0
        self.held_by: str | None = None

    def frozen(self) -> RequestRecord:
        return RequestRecord(
            self.request,
            self.lane,
            self.outcome,
            self.reason,
            self.dispatched,
            self.first,
            self.finished,
            self.output,
            self.max_new,
            self.preemptions,
            self.attempts,
            self.model,
            self.slow_gaps,
            self.held_by,
        )


class _Run:
    """The state of one simulation (see :func:`simulate`)."""

    def __init__(
        self,
        scheduler: Scheduler,
        spec: EngineSpec,
        lanes: Mapping[str, str],
        report_every: float,
        client: Client,
        followers: Mapping[tuple[str, int], SimRequest],
        targets: Mapping[str, SLOTargets] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.followers = followers
        self.client = client
        self.retries: list[tuple[float, int, SimRequest]] = []
        self.sequence = itertools.count()
        self.random = random.Random(client.seed)
        self.engine = make_engine(spec, scheduling=scheduler.scheduling, targets=targets)
        self.view = EngineView(self.engine)
        self.lanes = lanes
        self.report_every = report_every
        self.next_report = report_every
        self.live: dict[str, _Live] = {}
        self.order: list[_Live] = []
        self.running: dict[str, _Live] = {}
        self.outstanding = 0
        self.end: float | None = None

    def arrive(self, request: SimRequest, now: float) -> None:
        """A request arrives (again, if it is a client's retry)."""
        admission = self.scheduler.submit(request, now=now)
        live = self.live.get(request.id)
        if live is None:
            lane = self.lanes.get(request.id) or admission.lane or request.lane or "default"
            live = _Live(request, lane, admission.reason)
            self.live[request.id] = live
            self.order.append(live)
            self.outstanding += 1
        else:
            live.attempts += 1
            live.reason = admission.reason
        if admission.displaced is not None:  # a queued request it pushed out
            displaced_id, refusal = admission.displaced
            pushed = self.live[displaced_id]
            pushed.reason = refusal.reason
            self.refused(pushed, refusal, now)
        if not admission.accepted:
            self.refused(live, admission, now)

    def refused(self, live: _Live, admission: SimAdmission, now: float) -> None:
        """``live`` was refused: the client retries it if it may, else it ends."""
        if admission.retryable and live.attempts <= live.request.retries:
            wait = self.client.delay(live.attempts - 1, admission.retry_after, self.random.random())
            heapq.heappush(self.retries, (now + wait, next(self.sequence), live.request))
            return
        live.outcome, live.finished = SimOutcome.REJECTED, now
        self.outstanding -= 1

    def dispatch(self, now: float) -> None:
        released = self.scheduler.dispatch(now, self.view)
        for release in released.started:
            live = self.live[release.id]
            live.dispatched, live.max_new = now, release.max_new_tokens
            live.model = release.model
            request = live.request
            target = min(request.output_tokens, release.max_new_tokens)
            added = self.engine.add(
                request.id,
                request.prompt_tokens,
                target,
                release.priority,
                group=live.lane,
                sequences=request.n,
            )
            if added:
                self.running[request.id] = live
            else:  # longer than the engine's max_model_len: vLLM answers 400
                self.scheduler.finish(request.id, now=now, output_tokens=0)
                live.outcome, live.finished, live.reason = SimOutcome.REJECTED, now, "too_long"
                self.outstanding -= 1
        self.view.settle()
        for request_id in released.revoked:
            self.revoke(self.running.pop(request_id), now)
        held_by = released.held_by
        for request_id in released.expired:
            live = self.live[request_id]
            live.outcome, live.finished = SimOutcome.EXPIRED, now
            live.held_by = held_by.get(request_id)
            self.outstanding -= 1

    def revoke(self, live: _Live, now: float) -> None:
        """The scheduler ended ``live``, running: the engine aborts it, and
        its client has a retryable refusal (a 503, as the gate answers)."""
        self.engine.abort(live.request.id)
        live.dispatched = live.first = live.max_new = live.model = None
        live.output = live.reported = 0
        live.reason = "revoked"
        self.refused(live, SimAdmission(False, live.lane, "revoked", retryable=True), now)

    def deliver(self, now: float) -> bool:
        """Hand the finished iteration's results to the scheduler; whether
        anything that frees capacity or the engine's queue happened."""
        result = self.engine.complete()
        self.end = None
        scheduler = self.scheduler
        for request_id in result.first_tokens:
            self.live[request_id].first = now
            scheduler.first_token(request_id, now=now)
        for request_id, output in result.finished:
            live = self.running.pop(request_id)
            if output > live.reported:
                scheduler.tokens(request_id, output - live.reported, now=now)
            scheduler.finish(request_id, now=now, output_tokens=output)
            live.outcome, live.finished, live.output = SimOutcome.COMPLETED, now, output
            live.slow_gaps = self.engine.slow_gaps(request_id)
            self.outstanding -= 1
            self.follow(live.request, now)
        for request_id in result.preempted:
            self.live[request_id].preemptions += 1
        if self.report_every and now >= self.next_report:
            self.report(now)
        # A first token may open a prefill gate (the prompt left the backlog).
        return bool(result.finished or result.preempted or result.admitted or result.first_tokens)

    def follow(self, done: SimRequest, now: float) -> None:
        """Send the next turn of ``done``'s task after its tool wait, if it has one."""
        if done.task is None:
            return
        turn = self.followers.get((done.task, done.turn + 1))
        if turn is not None:
            at = now + turn.tool_wait
            sent = dataclasses.replace(turn, arrival=at)
            heapq.heappush(self.retries, (at, next(self.sequence), sent))

    def report(self, now: float) -> None:
        for request_id, live in self.running.items():
            output = self.engine.output_tokens(request_id)
            if output > live.reported:
                self.scheduler.tokens(request_id, output - live.reported, now=now)
                live.reported = output
        self.next_report = now + self.report_every


def simulate(
    workload: Workload,
    scheduler: Scheduler,
    engine: EngineSpec,
    *,
    lanes: Mapping[str, str] | None = None,
    report_every: float = 1.0,
    drain: float = 3600.0,
    client: Client | None = None,
    progress: Progress | None = None,
    targets: Mapping[str, SLOTargets] | None = None,
) -> SimulationResult:
    """Run ``workload`` through ``scheduler`` in front of the ``engine`` model.

    ``lanes`` maps request ids to the lane they are reported under (default:
    the scheduler's lane, else the request's hint). ``report_every`` is how
    often (simulated seconds) output tokens are reported while requests run (0:
    only at finish). Refused requests come back as ``client`` says, up to
    their ``retries``. The run stops once every request has ended, or
    ``drain`` seconds after the workload's duration; what is still queued,
    running or due to retry then is ``unfinished``. ``targets`` (per lane)
    set each lane's stall threshold and the TBT target its requests' slow
    gaps are counted against (:attr:`RequestRecord.slow_gaps`).
    """
    if report_every < 0 or not drain >= 0:
        raise UsageError("report_every and drain must be >= 0")
    followers = {(r.task, r.turn): r for r in workload.requests if r.task is not None and r.turn}
    run = _Run(scheduler, engine, lanes or {}, report_every, client or Client(), followers, targets)
    now = _loop(run, workload.openers, workload.duration + drain, progress)
    records = tuple(live.frozen() for live in run.order)
    return SimulationResult(
        scheduler.name,
        records,
        workload.duration,
        now,
        run.engine.statistics(),
        run.engine.tbt(),
    )


def _loop(
    run: _Run, requests: tuple[SimRequest, ...], stop: float, progress: Progress | None
) -> float:
    index, count, now, steps = 0, len(requests), 0.0, 0
    scheduler, engine, retries = run.scheduler, run.engine, run.retries
    inf = math.inf
    while True:
        arrival = min(
            requests[index].arrival if index < count else inf,
            retries[0][0] if retries else inf,
        )
        timer = _time(scheduler.wakeup())
        finish = inf if run.end is None else run.end
        if index >= count and not run.outstanding and not retries and run.end is None:
            break
        at = min(arrival, timer, finish)
        if at == inf or at > stop:
            break
        now = max(now, at)
        if finish <= arrival and finish <= timer:
            if run.deliver(now):
                run.dispatch(now)
        elif arrival <= timer:
            while index < count and requests[index].arrival == arrival:
                run.arrive(requests[index], now)
                index += 1
            while retries and retries[0][0] == arrival:
                run.arrive(heapq.heappop(retries)[2], now)
            run.dispatch(now)
        else:
            scheduler.observe(run.view, now)
            run.dispatch(now)
            if _time(scheduler.wakeup()) <= now:
                raise UsageError(f"{scheduler.name}: wakeup() did not move past {now}")
        if run.end is None:
            following = min(
                requests[index].arrival if index < count else inf,
                retries[0][0] if retries else inf,
                _time(scheduler.wakeup()),
            )
            run.end = engine.start(now, following)
        steps += 1
        if progress is not None and not steps % 2048:
            progress(index / count if count else 1.0)
    if progress is not None:
        progress(1.0)
    return now


def _time(when: float | None) -> float:
    return math.inf if when is None else when
