"""The dispatch path of a :class:`~slopolicy.core.policy.Policy`.

Each dispatch evaluates the fallback ladder when due, sweeps idle tasks,
expires overdue queued requests, then starts heads in fair order while seats,
the dispatch rate, the prefill budget, the KV ledger (a head with a
first-token deadline at the cold start, or within its tenant's share of the
pool, starts within the pool as held now:
:meth:`~slopolicy.core.policy.reservations.Reservations.fill`) and the
tenants' shares of the KV pool (:mod:`~slopolicy.core.kv.shares`: they bind
only where the pool is over-asked and a tenant is owed room; a tenant past
its share takes none past it while the engine reports preemptions) allow, and it
tells those shares of each queued request that expired waiting on the pool;
it reports to
the policy's :class:`~slopolicy.core.queueing.saturation.Saturation` whether
the engine held a startable head back (every seat taken, or a head that did
not fit the KV ledger or the prefill budget), and it says when the next
dispatch has work (:meth:`Dispatcher.next_wakeup`). A head it keeps back
carries why (:class:`~slopolicy.core.outcome.Hold`), so a request that
expires says what it last waited on (:attr:`Finished.held_by`). Where the
pool is contended, a start whose tenant is over its share of the engine
says so (:attr:`Started.over_share <slopolicy.Started.over_share>`), for
the host to have the engine preempt it first.

Starts are work-conserving, so a tenant over its share may hold room nobody
else asked for when it started. With ``engine.reclaim``, when a head of a
tenant within its share (:meth:`TenantDemand.portion
<slopolicy.core.queueing.demand.TenantDemand.portion>` 1) is held because its
KV does not fit the ledger, and the pool's own ends, at the pace they came
lately (:class:`~slopolicy.core.kv.turnover.Turnover`), would free its room
only after its first-token deadline, dispatch ends one running request of a
tenant over its share whose release lets the head in by the ledger's
forecast peak (the latest started, the least work lost, or else the
largest) and starts the head (:attr:`Dispatch.revoked
<slopolicy.Dispatch.revoked>`): a fair-share scheduler's reclaim of what it
lent (Kueue's ``reclaimWithinCohort``, YARN's fair-share preemption). One
revocation per head let in, never more: each revoked request is a request
lost, so a head that only several could cover waits for an end.

A started request can stall too. An engine short of KV preempts by
recompute: it takes a running request back, frees its blocks and computes
its prompt again when it re-admits it, and a long prompt among growing
answers can be taken back over and over, each time evicting the others'
progress with it (on a KV pool a quarter of ``llama3-8b``'s, while the
ledger still counted ``llama3-8b``'s pool, one 67,051-token prompt was
preempted 73 times and had its first token after 87 s). The
policy cannot see one request's preemptions, but it sees what they do: no
first token. So for a lane with ``slo_deadline`` and a ``ttft_p99`` target,
a started request that has no first token by its arrival plus that target,
while the engine reports preemptions
(:meth:`Health.preempting <slopolicy.core.health.health.Health.preempting>`),
is revoked (:attr:`Revocation.STALLED <slopolicy.Revocation.STALLED>`): past
the target it can only miss, and what it costs the engine is unbounded. An
engine that does not preempt revokes nothing, however late a first token.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Mapping

from slopolicy.core.kv.shares import KVShares, TenantKV
from slopolicy.core.ladder.events import LadderEvent
from slopolicy.core.lifecycle import Dispatch, Entry, Phase, Started
from slopolicy.core.outcome import Finished, Hold, Outcome, Revocation
from slopolicy.core.policy.parts import Parts
from slopolicy.core.policy.reservations import FILL
from slopolicy.core.policy.serving import Serving

__all__ = ("Dispatcher",)

#: What a queued request waits on when it waits for KV room: the ledger's
#: (no room) or its tenant's share of the pool.
_POOL_HOLDS = (Hold.KV, Hold.KV_SHARE)


class Dispatcher:
    """Expires and starts a policy's queued requests (see the module)."""

    __slots__ = (
        "_book",
        "_deadlines",
        "_decode_pace",
        "_demand",
        "_first_tokens",
        "_health",
        "_held",
        "_kv",
        "_kv_shares",
        "_owed",
        "_pace",
        "_queues",
        "_recheck",
        "_reservations",
        "_router",
        "_saturation",
        "_seats",
        "_serving",
        "_stall_bounds",
        "_stall_order",
        "_stalls",
        "_tasks",
        "_turnover",
    )

    def __init__(self, parts: Parts, serving: Serving) -> None:
        self._book = parts.book
        self._router = parts.router
        self._health = parts.health
        self._kv = parts.kv
        self._reservations = parts.reservations
        self._queues = parts.queues
        self._deadlines = parts.deadlines
        self._seats = parts.seats
        self._first_tokens = parts.first_tokens
        self._decode_pace = parts.decode_pace
        self._tasks = parts.tasks
        self._pace = parts.pace
        self._demand = parts.demand
        self._saturation = parts.saturation
        self._kv_shares = parts.kv_shares
        self._held = False  # whether the last start search left a head to the engine's limits
        self._serving = serving
        self._turnover = parts.turnover  # set only with a share window: demand is kept
        # The heads this dispatch held because their KV did not fit, in the
        # order it met them (with reclaim on): those a revocation may let in.
        self._owed: dict[str, Entry] = {}
        # When the heads held for KV with a first-token deadline next need a
        # reclaim check that no event may bring (None: none is held so).
        self._recheck: float | None = None
        # The started requests of lanes with a ttft_p99 target, by when their
        # first token is due (arrival + target; then start order): those
        # revoked if stalled then. An entry that had its first token, or
        # ended, leaves when it comes first.
        self._stall_bounds = parts.stall_bounds
        self._stalls: list[tuple[float, int, Entry]] = []
        self._stall_order = itertools.count()

    def dispatch(self, *, now: float, max_expired: int | None) -> Dispatch:
        """Expire overdue queued requests, then start every request that fits."""
        now = self._book.advance(now=now)
        event = self.evaluate(now=now) if self._health.due(now=now) else None
        tasks = self._tasks
        due = tasks.next_due()
        if due is not None and due <= now:
            self._book.tasks_ended(tasks.sweep(now=now))
        expired = self._expire(now, max_expired)
        started: list[Started] = []
        if len(expired) == max_expired and self._overdue(now):
            return Dispatch(started=(), expired=tuple(expired), ladder=event)
        stalls = self._stalls
        stalled = self._revoke_stalled(now) if stalls and stalls[0][0] <= now else ()
        shares, demand = self._kv_shares, self._demand
        if shares is not None and now >= shares._due:
            protected = frozenset() if demand is None else demand._within_share(now)
            # The pool counted: the engine's, once it reports it.
            shares._refresh_at(self._tenant_kv(), now, protected, self._kv.num_blocks)
        self._start_all(now, expired, shares, started)
        self._recheck = None
        revoked = stalled
        if self._owed:
            reclaimed = self._reclaim(now, shares, started)
            if reclaimed:  # what else fits beside the head it let in
                self._start_all(now, expired, shares, started)
                self._owed.clear()
                revoked += reclaimed
        saturation = self._saturation
        if saturation is not None:
            saturation._report(self._seats.full or self._held, now)
        return Dispatch(
            started=tuple(started), expired=tuple(expired), ladder=event, revoked=revoked
        )

    def _start_all(
        self, now: float, expired: list[Finished], shares: KVShares | None, started: list[Started]
    ) -> None:
        """Start heads into ``started`` until none may start (see :meth:`dispatch`)."""
        contended: bool | None = None  # the pool's, read at the first start
        while not self._seats.full:
            entry = self._start_next(now, expired, shares)
            if entry is None:
                break
            if contended is None:
                contended = self._contended(shares)
            started.append(self._started(entry, contended, now))

    def _started(self, entry: Entry, contended: bool, now: float) -> Started:
        """The record of ``entry``'s start at ``now`` (``contended``: the pool's)."""
        assert entry.dispatched_at is not None
        demand = self._demand
        return Started(
            id=entry.id,
            tenant=entry.tenant,
            lane=entry.lane,
            request=entry.request,
            kv_blocks=entry.kv_blocks,
            queue_wait=entry.dispatched_at - entry.arrival,
            rungs=entry.rungs,
            over_share=contended
            and demand is not None
            and demand._portion(entry.tenant, now) < 1.0,
        )

    def evaluate(self, *, now: float) -> LadderEvent | None:
        """Move the fallback ladder if pressure says so, at a checked ``now``."""
        kv = self._kv.statistics()
        head = self._deadlines.oldest(self._health.watch_lane)
        oldest = 0.0 if head is None else now - head.arrival
        return self._health.evaluate(
            now=now, kv_ledger=kv.peak_blocks / kv.num_blocks, oldest_wait=oldest
        )

    def _start_next(
        self, now: float, expired: list[Finished], shares: KVShares | None
    ) -> Entry | None:
        """Start the first head in fair order that may start, giving up the
        lost ones on the way; ``shares``: the KV pool's, where they bind."""
        self._held = False  # the dispatch rate is a contract, not the engine's limit
        pace = self._pace
        if pace is not None and not pace._ready(now):
            return None  # the next start, whichever it is, waits for the rate
        queues, seats, health = self._queues, self._seats, self._health
        first_tokens, reservations = self._first_tokens, self._reservations
        waits = health.favour_waits()
        decode_pace = self._decode_pace
        skip: dict[str, set[str]] = {}  # tenants held by their KV share, by lane
        while True:  # again when a lost head left or a tenant was held: the candidates changed
            candidates = queues._candidates(skip)  # they change only through it
            if waits and len(candidates) > 1:  # the ladder puts these heads first
                candidates.sort(key=lambda pair: not _first(waits, pair[0], pair[1], now))
            for lane, entry in candidates:
                if health.paused(lane):
                    entry.held_by = Hold.PAUSED
                    continue
                needed = seats.needed(lane, entry.request.sequences)
                if not seats.fits(lane, needed):
                    entry.held_by = Hold.SEATS
                    continue
                if first_tokens.lost(lane, entry.prompt_tokens, arrival=entry.arrival, now=now):
                    self._take(lane, entry, skip)
                    entry.held_by = Hold.LATE
                    expired.append(self._book.end_queued(entry, Outcome.EXPIRED, now=now))
                    break
                if not first_tokens.admits(lane, entry.prompt_tokens, now=now):
                    self._held = True
                    entry.held_by = Hold.PREFILL
                    continue  # the engine has enough prompt work ahead; the rest waits in our order
                if (
                    decode_pace is not None
                    and decode_pace.active
                    and not decode_pace.fits(first_tokens.compute(entry.prompt_tokens) or 0.0)
                ):
                    self._held = True
                    entry.held_by = Hold.PACE
                    continue  # the decoding requests are behind their pace: no prompt beside them
                within = shares is not None and shares._within(
                    entry.tenant, entry.kv_blocks, entry.weight
                )
                if shares is not None and not within and not self._past_share(shares, entry, now):
                    self._held = True
                    entry.held_by = Hold.KV_SHARE
                    skip.setdefault(lane, set()).add(entry.tenant)
                    break  # the lane's next tenant may start in its place
                if reservations.start(entry, now=now) or (
                    lane in first_tokens._bounds  # a first-token deadline: waiting loses it
                    and (fill := reservations.fill(entry, within_share=within)) is not None
                    and reservations.start(entry, now=now, fill=fill)
                ):
                    self._take(lane, entry, skip)
                    self._start(lane, entry, needed, now)
                    return entry
                entry.held_by = Hold.KV
                if entry.kv_blocks > self._kv.capacity_blocks(lane):
                    # Admitted before the engine reported a smaller pool: it can never start.
                    self._take(lane, entry, skip)
                    expired.append(self._book.end_queued(entry, Outcome.EXPIRED, now=now))
                    break
                self._held = True  # its KV does not fit
                if self._turnover is not None:
                    self._owed[entry.id] = entry
            else:
                return None

    def _reclaim(
        self, now: float, shares: KVShares | None, started: list[Started]
    ) -> tuple[Finished, ...]:
        """Revoke one running request of a tenant over its share (none
        started in this dispatch, in ``started``) for the first head held
        for KV this dispatch whose tenant is within its share and whose
        first-token deadline the pool's own ends
        (:class:`~slopolicy.core.kv.turnover.Turnover`) would miss, and
        start that head: the latest started request whose release lets the
        head in by the ledger's peak, or else the largest. The record
        (outcome ``revoked``), or none: one request lost for one let in,
        never more."""
        demand, turnover = self._demand, self._turnover
        assert demand is not None  # reclaim needs the demand estimate
        assert turnover is not None
        heads = list(self._owed.values())
        self._owed.clear()
        bounds, kv = self._first_tokens._bounds, self._kv
        late: list[tuple[Entry, int]] = []  # the heads at risk, and the blocks each lacks
        recheck = math.inf
        for head in heads:
            bound = bounds.get(head.lane)
            if bound is None or head.phase is not Phase.QUEUED:
                continue  # no first-token deadline: it waits for an end
            if demand._portion(head.tenant, now) < 1.0:
                recheck = min(recheck, demand._due)  # the next estimate may find it within
                continue
            need = head.kv_blocks - kv.free_blocks(head.lane)
            at_risk = turnover._late_from(max(need, 0), head.arrival + bound, now)
            if at_risk <= now:
                late.append((head, need))
                recheck = min(recheck, demand._due)  # if none is let in now: the next estimate
            else:
                recheck = min(recheck, at_risk)  # till then the pool's own ends are in time
        self._recheck = recheck if recheck < math.inf else None
        if not late:
            return ()
        fresh = {s.id for s in started}
        over: dict[str, bool] = {}
        victims: list[Entry] = []
        for entry in self._book.entries.values():
            if entry.phase is Phase.RUNNING and entry.id not in fresh:
                tenant = entry.tenant
                if tenant not in over:
                    over[tenant] = demand._portion(tenant, now) < 1.0
                if over[tenant]:
                    victims.append(entry)
        if not victims:
            return ()
        reservations, seats = self._reservations, self._seats
        for head, need in late:
            able = [v for v in victims if v.kv_blocks >= need]
            if not able:
                continue
            latest = max(able, key=_started_at)  # the least work lost
            largest = max(able, key=_blocks)
            tried = (latest, largest)
            victim = next((v for v in tried if reservations.fits_without(head, without=v)), None)
            if victim is None:
                continue  # no one revocation lets it in
            victim.revoked_for = Revocation.RECLAIM
            revoked = self._serving.end(victim, Outcome.REVOKED, now)
            needed = seats.needed(head.lane, head.request.sequences)
            # Its seats were free when it was held (the victim's are now too),
            # unless a later start of this dispatch took its lane's last ones.
            if seats.fits(head.lane, needed) and reservations.start(head, now=now):
                self._start_head(head, needed, now, shares, started)
            return (revoked,)
        return ()

    def _revoke_stalled(self, now: float) -> tuple[Finished, ...]:
        """Revoke the started requests whose first token is overdue (their
        lane's ``ttft_p99`` past arrival) while the engine preempts (see the
        module): their records. Those that had it, or ended, are forgotten; a
        stalled one stays first while the engine does not preempt."""
        stalls, revoked = self._stalls, []
        preempting: bool | None = None  # read once, at the first stalled one
        while stalls and stalls[0][0] <= now:
            entry = stalls[0][2]
            if entry.phase is Phase.RUNNING and entry.first_token_at is None:
                if preempting is None:
                    preempting = self._health.preempting(now=now)
                if not preempting:
                    break
                entry.revoked_for = Revocation.STALLED
                revoked.append(self._serving.end(entry, Outcome.REVOKED, now))
            heapq.heappop(stalls)
        return tuple(revoked)

    def _start_head(
        self,
        entry: Entry,
        seats: int,
        now: float,
        shares: KVShares | None,
        started: list[Started],
    ) -> None:
        """Start ``entry``, a head whose KV was just reserved, on ``seats``
        seats, into ``started``."""
        lane = entry.lane
        self._queues.remove(lane, entry)
        self._start(lane, entry, seats, now)
        started.append(self._started(entry, self._contended(shares), now))

    def _contended(self, shares: KVShares | None) -> bool:
        """Whether the KV pool is contended, so that the engine's preemptions
        are to come and a start over its tenant's share says so
        (:attr:`Started.over_share <slopolicy.Started.over_share>`): the
        tenants' needs exceed it (``shares``' level is finite), or the
        running requests are forecast past :data:`FILL` of it at their peak
        (where the fill stops: the ladder's default ``kv_usage`` trigger
        reads KV pressure above it). Never without share protection."""
        if shares is None:
            return False
        if shares.level < math.inf:
            return True
        kv = self._kv
        return kv.statistics().peak_blocks > FILL * kv.num_blocks

    def _past_share(self, shares: KVShares, entry: Entry, now: float) -> bool:
        """Whether ``entry``'s tenant, past its share of the pool with it, may
        take its KV: leaving free the room the other tenants are owed, with
        nothing running (no end would free that room), or not fitting at all
        (then the ledger holds it, as any head); never while the engine
        reports preemptions (:meth:`Health.preempting
        <slopolicy.core.health.health.Health.preempting>`: the pool is
        over-committed in fact, and a start past a share would add to what
        the engine evicts), when the head, held by its share, yields its
        lane to the next tenant even if it does not fit."""
        tenant, blocks, weight = entry.tenant, entry.kv_blocks, entry.weight
        if not self._book.running:
            return True  # no end to come would free the room owed: none is kept
        if self._health.preempting(now=now):
            return False
        free = self._kv.free_blocks(entry.lane)
        return free < blocks or shares._allows(tenant, blocks, weight, free)

    def _tenant_kv(self) -> dict[str, TenantKV]:
        """What each tenant's live requests hold and would reserve (blocks)."""
        took: dict[str, tuple[float, int, int]] = {}
        for entry in self._book.entries.values():
            weight, held, queued = took.get(entry.tenant, (entry.weight, 0, 0))
            if entry.phase is Phase.RUNNING:
                held += entry.kv_blocks
            else:
                queued += entry.kv_blocks
            took[entry.tenant] = (weight, held, queued)
        return {
            tenant: TenantKV(weight=weight, held=held, queued=queued)
            for tenant, (weight, held, queued) in took.items()
        }

    def _take(self, lane: str, entry: Entry, skip: Mapping[str, set[str]]) -> None:
        """Take ``entry``, the head of ``lane`` as the candidates showed it, out of its queue."""
        if lane in skip:  # not the head a plain pick would take
            self._queues.remove(lane, entry)
        else:
            self._queues._pop(lane)

    def _start(self, lane: str, entry: Entry, seats: int, now: float) -> None:
        """Start ``entry``, out of ``lane``'s queue with its KV reserved, on
        ``seats`` seats (its tenant's share of the pool, where kept, counts it)."""
        if self._kv_shares is not None:
            self._kv_shares._started(entry.tenant, entry.kv_blocks)
        # Fair-queue counters are charged what is known to be served: the
        # prompt now, output tokens as they arrive (VTC's order), so nothing
        # has to be refunded later.
        prompt_cost = self._router.estimator.score(entry.prompt_tokens, 0, entry.request.tool_risk)
        self._queues._charge(lane, entry.tenant, prompt_cost, entry.weight)
        if self._pace is not None:
            self._pace._charge(entry.cost, now)
        if self._demand is not None:
            self._demand._serve(entry.share_cost, now)
        self._first_tokens.started(entry.id, lane, entry.prompt_tokens, now=now)
        if self._decode_pace is not None:
            self._decode_pace._started(self._first_tokens.compute(entry.prompt_tokens) or 0.0)
        entry.phase = Phase.RUNNING
        entry.dispatched_at = now
        if entry.request.task is not None:
            self._tasks.started(entry.request.task, entry.id)
        self._book.running += 1
        self._seats.take(entry.id, lane, seats)
        bound = self._stall_bounds.get(lane)
        if bound is not None:
            heapq.heappush(self._stalls, (entry.arrival + bound, next(self._stall_order), entry))

    def _overdue(self, now: float) -> bool:
        deadline = self._deadlines.next()
        return deadline is not None and deadline <= now

    def _expire(self, now: float, limit: int | None) -> list[Finished]:
        expired: list[Finished] = []
        deadlines, shares = self._deadlines, self._kv_shares
        if now < deadlines.floor:  # the usual case: nothing can be overdue yet
            return expired
        while len(expired) != limit:
            entry = deadlines.pop_overdue(now=now)
            if entry is None:
                break
            if shares is not None and entry.held_by in _POOL_HOLDS:
                # It gave up on room another tenant holds: its tenant needed it.
                shares._gave_up(entry.tenant, entry.kv_blocks, entry.weight, now)
            self._queues.remove(entry.lane, entry)
            expired.append(self._book.end_queued(entry, Outcome.EXPIRED, now=now))
        return expired

    def can_start(self, *, now: float) -> bool:
        """Whether a dispatch at a checked ``now`` could start anything."""
        pace = self._pace
        return not self._seats.full and (pace is None or pace._ready(now))

    def next_start(self) -> float | None:
        """When the dispatch rate lets the next start, if it holds it (the
        prefill budget opens at a first token or an end, not at a time)."""
        pace, book = self._pace, self._book
        if pace is None or len(book.entries) == book.running or self._seats.full:
            return None
        at = book.now
        ready = pace._ready_at(at)
        return ready if ready > at else None

    def next_wakeup(self, *, now: float) -> float | None:
        """When a dispatch next has work, at a checked ``now``; ``None``: never."""
        at = max(now, self._book.now)
        wake = math.inf
        stalls = self._stalls
        stall = stalls[0][0] if stalls and self._health.preempting(now=at) else None
        due = self._first_tokens.report_due()  # the prefill budget's hold on a cold start lifts
        for when in (
            self._deadlines.next(),
            self.next_start(),
            self._health.next_evaluation,
            self._recheck,
            stall,
            due if due is not None and due > at else None,
        ):
            if when is not None and when < wake:
                wake = when
        return None if wake == math.inf else max(wake, at)


def _started_at(entry: Entry) -> float:
    """When the running ``entry`` started (its dispatch time)."""
    assert entry.dispatched_at is not None  # set when it started
    return entry.dispatched_at


def _blocks(entry: Entry) -> int:
    """The KV blocks ``entry`` reserves."""
    return entry.kv_blocks


def _first(waits: Mapping[str, float], lane: str, entry: Entry, now: float) -> bool:
    """Whether the ladder puts ``entry``, the head of ``lane``, first: its lane
    is favoured and it has waited the wait ``waits`` gives it (seconds)."""
    wait = waits.get(lane)
    return wait is not None and now - entry.arrival >= wait
