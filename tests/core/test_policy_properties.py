"""The Policy's lifecycle invariants under random traffic (DESIGN.md 3, 4, 6)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from slopolicy import EngineSignals, Policy, PolicyConfig, Reason, Request, Revocation
from slopolicy.core.cost.outputs import OutputForecast
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.decisions import Admit, Demote
from slopolicy.core.ladder.pressure import Pressure
from slopolicy.core.lifecycle import Entry, Started
from slopolicy.core.outcome import Finished, Hold, Outcome
from slopolicy.core.policy.reservations import FILL
from slopolicy.errors import UsageError

_CONFIG = PolicyConfig.from_dict(
    {
        "lanes": [
            {
                "name": "interactive",
                "max_new_tokens": 64,
                "max_prompt_tokens": 400,
                "queue_capacity": 4,
                "max_queue_wait_s": 2.0,
                "weight": 4,
                "kv_reserve": 0.2,
            },
            {
                "name": "heavy",
                # First-token targets: a start stalled past the p99 one while
                # the engine preempts is revoked.
                "slo": {"ttft_p95_s": 2.0, "ttft_p99_s": 4.0},
                "max_new_tokens": 256,
                "max_prompt_tokens": 1500,
                "queue_capacity": 4,
                "max_queue_wait_s": 8.0,
                "weight": 2,
                "max_running": 1,
            },
            {
                "name": "background",
                "max_prompt_tokens": 3000,
                "over_budget": "reject",
                "queue_capacity": 6,
                "max_queue_wait_s": 20.0,
                "weight": 1,
            },
        ],
        "tiers": {
            "default": {"rate": 3000.0, "burst": 8000.0, "max_concurrency": 5},
            "tiny": {
                "rate": 50.0,
                "burst": 900.0,
                "max_concurrency": 2,
                "allowed_lanes": ["interactive", "background"],
            },
        },
        "tenants": {"t3": "tiny"},
        "kv": {"num_blocks": 150, "block_size": 16},
        # The prefill budget on: starts held back while prompts ahead are computed.
        "engine": {"max_running": 3, "prefill_horizon_s": 0.5},
        # A ladder quick to move, so the runs reach shedding (by share) too.
        "ladder": {"dwell_s": 0.5, "cooldown_s": 1.0},
    }
)
_TENANTS = st.sampled_from(["t0", "t1", "t2", "t3"])
# Counts and times that must be refused, changing nothing: NaN (json.loads
# yields it), negative, not an int, past 2**53; NaN and infinities, a
# time.time_ns() value, milliseconds since the epoch, an int too large for a float.
_BAD_COUNTS = st.sampled_from([math.nan, -1, "7", 10**400, 2**53 + 1, True, 2.0])
_BAD_NOWS = st.sampled_from([math.nan, math.inf, -math.inf, 1.7e18, 1.7e12, 10**400, "1"])


class PolicyLifecycle(RuleBasedStateMachine):
    """Random submits, dispatches, tokens, finishes, cancels and time steps."""

    config = _CONFIG

    def __init__(self) -> None:
        super().__init__()
        self.policy = Policy(self.config, counter=HeuristicCounter())
        self.now = 0.0
        self.count = 0
        self.live: dict[str, str] = {}  # id -> "queued" | "running"
        self.ended: dict[str, Outcome] = {}

    def _end(self, finished: Finished) -> None:
        assert finished.id not in self.ended, f"{finished.id} ended twice"
        phase = self.live.pop(finished.id)
        assert phase in ("queued", "running")
        # What held it back is said only of a request that ended queued.
        assert finished.held_by is None or phase == "queued", f"{finished.id} started, held"
        if finished.held_by is not None:
            event(f"an expired request was held by {finished.held_by.value}")
        self.ended[finished.id] = finished.outcome

    @rule(
        tenant=_TENANTS,
        prompt=st.integers(0, 3200),
        max_new=st.integers(1, 400),
        lane=st.none() | st.sampled_from(["interactive", "heavy", "background"]),
        deadline=st.none() | st.floats(0.0, 5.0),
    )
    def submit(
        self, tenant: str, prompt: int, max_new: int, lane: str | None, deadline: float | None
    ) -> None:
        self.count += 1
        request_id = f"r{self.count}"
        request = Request(
            id=request_id,
            tenant=tenant,
            prompt_tokens=prompt,
            max_new_tokens=max_new,
            lane=lane,
            deadline=None if deadline is None else self.now + deadline,
        )
        decision = self.policy.submit(request, now=self.now)
        if isinstance(decision, Admit | Demote):
            self.live[request_id] = "queued"
            if decision.displaced is not None:  # a full queue made room (DESIGN.md 9)
                finished = decision.displaced.finished
                assert self.live.get(finished.id) == "queued", f"{finished.id} displaced"
                assert finished.tenant != tenant
                assert finished.lane == decision.lane
                assert finished.outcome is Outcome.REJECTED
                assert decision.displaced.refusal.reason is Reason.QUEUE_FULL
                self._end(finished)
                event("a full queue displaced a request")
        else:
            self.ended[request_id] = Outcome.REJECTED

    @rule()
    def dispatch(self) -> None:
        before = self.policy.statistics().kv
        result = self.policy.dispatch(now=self.now)
        for finished in result.expired:
            assert finished.outcome is Outcome.EXPIRED
            self._end(finished)
        for started in result.started:
            assert self.live[started.id] == "queued"
            self.live[started.id] = "running"
        self._revoked(result.revoked, result.started)
        self._started(result.started)
        if result.started:
            # Invariant 2: what it started fits the pool at its forecast peak
            # (until it ends: answers that ran past their forecast may have
            # put a later peak over the pool already, which the engine meets),
            # or, a deadline head at the cold start or within its tenant's
            # share of the pool, the pool as held now.
            kv = self.policy.statistics().kv
            assert kv.used_blocks <= kv.num_blocks
            verdicts = self._within_at_start(result.started)
            filled = any(self._fill(entry, within=within) is not None for entry, within in verdicts)
            if filled:
                event("a deadline head may have started within the pool as held now")
            if any(self._fill(entry, within=within) is None for entry, within in verdicts):
                event("a start the peak bound")
            over_before = before.peak_blocks > before.num_blocks
            assert kv.peak_blocks <= kv.num_blocks or over_before or filled
        self._check_work_conserving()
        # Invariant 6: nothing still queued is past its deadline.
        for entry in self.policy._entries.values():
            if entry.phase.value == "queued":
                assert entry.deadline > self.now, f"{entry.id} overdue"

    def _revoked(self, revoked: Sequence[Finished], started: Sequence[Started]) -> None:
        """Only running requests, none started in the same dispatch. Reclaim
        (``engine.reclaim``): of tenants over their share, and only with a
        start of a tenant within its share. A stall: no first token by its
        lane's p99 TTFT target, while the engine reports preemptions."""
        if not revoked:
            return
        demand = self.policy.demand
        assert demand is not None
        fresh = {s.id for s in started}
        reclaimed = False
        for finished in revoked:
            assert finished.outcome is Outcome.REVOKED
            assert self.live[finished.id] == "running", f"{finished.id} revoked, not running"
            assert finished.id not in fresh, f"{finished.id} started and revoked at once"
            if finished.revoked_for is Revocation.STALLED:
                assert finished.ttft is None, f"{finished.id} had its first token"
                assert finished.lane == "heavy"
                assert finished.e2e >= 4.0, f"{finished.id} revoked before its p99 target"
                assert self.policy.health.preempting(now=self.now)
                event("a stalled start was revoked")
            else:
                assert finished.revoked_for is Revocation.RECLAIM
                assert demand.over(finished.tenant, now=self.now)
                reclaimed = True
            self._end(finished)
        if reclaimed:
            assert any(not demand.over(s.tenant, now=self.now) for s in started)
            event("reclaim revoked a running request")

    def _fill(self, entry: Entry, *, within: bool) -> float | None:
        """The fill ``entry`` may start within past the peak (its tenant
        ``within`` its share of the pool with it): a first-token deadline,
        and its answer still at its ceiling for want of a forecast or its
        tenant within its share."""
        policy = self.policy
        outputs = policy.reservations.outputs
        if entry.lane not in policy.first_tokens._bounds or outputs is None:
            return None
        cold = entry.kv_output >= entry.request.max_new_tokens and (
            outputs.forecast(entry.lane, tenant=entry.tenant) is None
        )
        if not cold:
            share = "within" if within else "past"
            event(f"past the cold start, a deadline head {share} its share")
        return FILL if within or cold else None

    def _within_at_start(self, started: Sequence[Started]) -> list[tuple[Entry, bool]]:
        """Each of one dispatch's ``started`` entries, and whether its tenant
        was within its share of the pool with it at its start: what the
        tenant holds now, less what its later starts in the dispatch took."""
        policy = self.policy
        shares = policy._dispatcher._kv_shares
        entries = [policy._entries[s.id] for s in started]
        if shares is None:
            return [(entry, False) for entry in entries]
        verdicts: list[tuple[Entry, bool]] = []
        later: dict[str, int] = {}
        for entry in reversed(entries):
            held = shares._tenants[entry.tenant].held - later.get(entry.tenant, 0)
            verdicts.append((entry, held <= entry.weight * shares._level))
            later[entry.tenant] = later.get(entry.tenant, 0) + entry.kv_blocks
        return verdicts[::-1]

    def _running_ids(self) -> list[str]:
        return [rid for rid, phase in self.live.items() if phase == "running"]

    @precondition(lambda self: any(p == "running" for p in self.live.values()))
    @rule(data=st.data(), count=st.integers(0, 50))
    def tokens(self, data: st.DataObject, count: int) -> None:
        request_id = data.draw(st.sampled_from(self._running_ids()))
        if data.draw(st.booleans()):
            self.policy.first_token(request_id, now=self.now)
        self.policy.tokens(request_id, count, now=self.now)

    @precondition(lambda self: any(p == "running" for p in self.live.values()))
    @rule(
        data=st.data(),
        outcome=st.sampled_from(["completed", "failed", "cancelled"]),
        usage=st.none() | st.integers(0, 500),
    )
    def finish(self, data: st.DataObject, outcome: str, usage: int | None) -> None:
        request_id = data.draw(st.sampled_from(self._running_ids()))
        self._end(
            self.policy.finish(request_id, now=self.now, outcome=outcome, output_tokens=usage)
        )

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        request_id = data.draw(st.sampled_from(sorted(self.live)))
        finished = self.policy.cancel(request_id, now=self.now)
        assert finished.outcome is Outcome.CANCELLED
        self._end(finished)

    @rule(dt=st.floats(0.0, 3.0))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(rate=st.sampled_from([0.0, 3.0]), pool=st.sampled_from([None, 40, 90, 150, 400]))
    def engine_report(self, rate: float, pool: int | None) -> None:
        """The engine reports preempting (``rate`` > 0) or not, and maybe its
        KV pool (blocks): one below the config's is counted from now on, even
        below what is live (then nothing starts until enough ends)."""
        tokens = None if pool is None else pool * 16
        signals = EngineSignals(
            observed_at=self.now, preemption_rate=rate, kv_capacity_tokens=tokens
        )
        self.policy.observe(signals, now=self.now)
        if pool is not None:
            kv = self.policy.kv
            assert kv.statistics().num_blocks == min(kv.configured_blocks, pool)
            if kv.statistics().used_blocks > pool:
                event("the engine's pool is smaller than what is live")

    @rule(hot=st.booleans())
    def pressure(self, hot: bool) -> None:
        """The engine's KV full or empty: the ladder climbs or comes down."""
        ladder = self.policy.health.ladder
        assert ladder is not None
        ladder.update(Pressure(kv_usage=0.99 if hot else 0.0), now=self.now)
        if ladder.sheds("heavy"):
            event("the ladder sheds")

    def _refused(self, call: Callable[[], object], match: str) -> None:
        """A bad step raises ``UsageError`` and changes nothing, not even the clock."""
        before = self._state()
        with pytest.raises(UsageError, match=match):
            call()
        assert self._state() == before

    def _state(self) -> object:
        policy = self.policy
        entries = {
            entry.id: (entry.phase, entry.output_tokens, entry.first_token_at, entry.last_token_at)
            for entry in policy._entries.values()
        }
        return policy.statistics(), policy._now, entries

    @precondition(lambda self: any(p == "running" for p in self.live.values()))
    @rule(data=st.data(), bad=_BAD_COUNTS, at_finish=st.booleans())
    def bad_count(self, data: st.DataObject, bad: Any, at_finish: bool) -> None:
        request_id = data.draw(st.sampled_from(self._running_ids()))
        if at_finish:
            call = partial(self.policy.finish, request_id, now=self.now, output_tokens=bad)
            self._refused(call, r"^output_tokens must be")
        else:
            self._refused(
                partial(self.policy.tokens, request_id, bad, now=self.now), r"^token count must be"
            )

    @rule(data=st.data(), bad=_BAD_NOWS)
    def bad_now(self, data: st.DataObject, bad: Any) -> None:
        policy, running = self.policy, self._running_ids()
        calls: list[Callable[[], object]] = [
            partial(policy.submit, Request(id="bad", prompt_tokens=1), now=bad),
            partial(policy.dispatch, now=bad),
            partial(policy.statistics, now=bad),
            *(partial(policy.cancel, request_id, now=bad) for request_id in sorted(self.live)),
            *(partial(policy.tokens, request_id, 1, now=bad) for request_id in running),
            *(partial(policy.finish, request_id, now=bad) for request_id in running),
        ]
        self._refused(data.draw(st.sampled_from(calls)), r"^now must be")

    def _started(self, started: tuple[Started, ...]) -> None:
        """Hook for what a dispatch started (the paced machine checks the rate)."""

    def _check_work_conserving(self) -> None:
        # Invariant 4: after dispatch, no waiting head could start now.
        policy = self.policy
        if policy.seats.full:
            return
        if policy.pace is not None and not policy.pace.ready(now=self.now):
            queued = sum(policy.statistics().queued.values())
            # Held back by the rate: a caller knows when to come back.
            assert (policy.next_start() is not None) == (queued > 0)
            return
        first_tokens = policy.first_tokens
        for lane, entry in policy._queues.candidates():
            if policy.health.paused(lane):
                continue  # the ladder holds it (pause_background): by design
            if not policy.seats.fits(lane, policy.seats.needed(lane, entry.request.sequences)):
                continue  # its seats are taken (the lane's cap, other lanes' reserves)
            if not first_tokens.admits(lane, entry.prompt_tokens, now=self.now):
                # Held back by the prefill budget: the engine has prompt work
                # ahead of it (it is not idle), and a first token or an end
                # (which the driver dispatches after) opens it.
                assert first_tokens.ahead(lane) > 0
                continue
            if entry.held_by is Hold.KV_SHARE:
                # The one exception (DESIGN, invariant 4): held by its tenant's
                # share of an over-asked pool, while another tenant is owed
                # the room; only past that share, and only while something
                # runs (an end to free the room owed).
                shares = policy._dispatcher._kv_shares
                assert shares is not None
                assert not shares._within(entry.tenant, entry.kv_blocks, entry.weight)
                assert policy._dispatcher._book.running > 0
                event("a head held by its tenant's share of the KV pool")
                continue
            assert not policy.reservations.fits(entry), f"{entry.id} in {lane} fits but waits"
            shares = policy._dispatcher._kv_shares
            within = shares is not None and shares._within(
                entry.tenant, entry.kv_blocks, entry.weight
            )
            fill = self._fill(entry, within=within)
            if fill is not None:
                # A deadline head at the cold start or within its tenant's
                # share starts within the pool as held now.
                assert not policy.reservations.fits(entry, fill=fill), f"{entry.id} fits now"

    @invariant()
    def phases_match(self) -> None:
        for request_id, phase in self.live.items():
            assert self.policy.phase(request_id) == phase
        for request_id in self.ended:
            assert self.policy.phase(request_id) is None

    @invariant()
    def deadlines_index_the_queued(self) -> None:
        # The deadline index drops whatever left the queue (started, expired,
        # cancelled, displaced): its answers are those of the queued requests.
        queued = [e for e in self.policy._entries.values() if e.phase.value == "queued"]
        assert self.policy.next_deadline() == min((e.deadline for e in queued), default=None)
        for lane in ("interactive", "heavy", "background"):
            waiting = [e for e in queued if e.lane == lane]
            oldest = self.policy._deadlines.oldest(lane)
            assert (oldest is None) == (not waiting)
            if oldest is not None:
                assert oldest.arrival == min(e.arrival for e in waiting)

    @invariant()
    def ledgers_balance(self) -> None:
        stats = self.policy.statistics()
        running = self._running_ids()
        assert stats.running == len(running) <= self.policy.max_running
        assert stats.quotas.in_flight == len(self.live)
        assert sum(stats.queued.values()) == len(self.live) - len(running)
        counted = sum(stats.outcomes.values())
        assert counted == len(self.ended)
        assert stats.submitted == self.count

    def teardown(self) -> None:
        for request_id in sorted(self.live):
            self._end(self.policy.cancel(request_id, now=self.now))
        stats = self.policy.statistics()
        assert stats.running == 0
        assert stats.kv.used_blocks == 0
        assert stats.quotas.in_flight == 0
        assert sum(stats.queued.values()) == 0


PolicyLifecycle.TestCase.settings = settings(max_examples=150, stateful_step_count=60)
TestPolicyLifecycle = PolicyLifecycle.TestCase


class CrowdedPolicyLifecycle(PolicyLifecycle):
    """The same lifecycle with queues of one and two places and tenants of
    different weights without concurrency caps, so full queues push requests
    out often: every request still ends exactly once, nothing leaks."""

    config = PolicyConfig.from_dict(
        {
            **_CONFIG.model_dump(mode="json"),
            "lanes": [
                {**lane.model_dump(mode="json"), "queue_capacity": capacity}
                for lane, capacity in zip(_CONFIG.lanes, (2, 1, 2), strict=True)
            ],
            "tiers": {
                "default": {"weight": 1.0},
                "heavy": {"weight": 3.0},
                "tiny": {"weight": 0.5, "allowed_lanes": ["interactive", "background"]},
            },
            "tenants": {"t2": "heavy", "t3": "tiny"},
        }
    )


CrowdedPolicyLifecycle.TestCase.settings = settings(max_examples=150, stateful_step_count=60)
TestCrowdedPolicyLifecycle = CrowdedPolicyLifecycle.TestCase

_RATE, _BURST = 2000.0, 1000.0


class PacedPolicyLifecycle(PolicyLifecycle):
    """The same lifecycle with ``engine.dispatch_rate``: every invariant above
    holds, and every start keeps to a model of the pace (GCRA): a request
    starts only while the backlog is at most one burst, each start adds its
    estimated cost, each finish settles the actual one; the policy's next
    start is the model's."""

    config = PolicyConfig.from_dict(
        {
            **_CONFIG.model_dump(mode="json"),
            "engine": {"max_running": 3, "dispatch_rate": _RATE, "dispatch_burst": _BURST},
        }
    )

    def __init__(self) -> None:
        super().__init__()
        self.tat = -math.inf  # the model's theoretical arrival time
        self.charged: dict[str, float] = {}

    def _started(self, started: tuple[Started, ...]) -> None:
        for item in started:
            assert self.tat - self.now <= _BURST / _RATE + 1e-9, "started past the burst"
            cost = self.policy._entries[item.id].cost
            self.tat = max(self.tat, self.now) + cost / _RATE
            self.charged[item.id] = cost

    def _end(self, finished: Finished) -> None:
        charged = self.charged.pop(finished.id, None)
        if charged is not None:  # it ran: the actual cost is settled
            self.tat += (finished.cost - charged) / _RATE
        super()._end(finished)

    @invariant()
    def the_pace_is_the_models(self) -> None:
        pace = self.policy.pace
        assert pace is not None
        expected = max(self.now, self.tat - _BURST / _RATE)
        assert pace.ready_at(now=self.now) == pytest.approx(expected, abs=1e-9)


PacedPolicyLifecycle.TestCase.settings = settings(max_examples=100, stateful_step_count=60)
TestPacedPolicyLifecycle = PacedPolicyLifecycle.TestCase


class ColdPoolPolicyLifecycle(PolicyLifecycle):
    """The same lifecycle on a pool a few requests fill, the interactive lane
    with a first-token deadline: its heads that the peak holds back at the
    cold start, or within their tenant's share of the pool, start within the
    pool as held now (``Reservations.fill``). Every invariant above holds; what starts
    never holds more than the pool."""

    config = PolicyConfig.from_dict(
        {
            **_CONFIG.model_dump(mode="json"),
            "lanes": [
                {
                    **lane.model_dump(mode="json"),
                    "max_new_tokens": 800,
                    "kv_reserve": 0.1,
                    "slo": {"ttft_p95_s": 1.0},
                }
                if lane.name == "interactive"
                else lane.model_dump(mode="json")
                for lane in _CONFIG.lanes
            ],
            "kv": {"num_blocks": 60, "block_size": 16},
            # Eight seats and no prefill budget: the KV ledger is what holds heads.
            "engine": {"max_running": 8, "prefill_horizon_s": None},
        }
    )


ColdPoolPolicyLifecycle.TestCase.settings = settings(max_examples=100, stateful_step_count=60)
TestColdPoolPolicyLifecycle = ColdPoolPolicyLifecycle.TestCase


class WarmPoolPolicyLifecycle(ColdPoolPolicyLifecycle):
    """The cold pool's lifecycle past the cold start (each lane forecasts
    from its first answer, and has one of 600 tokens), the heavy lane with a
    first-token deadline too: a deadline head that the peak holds back
    starts within the pool as held now only while its tenant stays within
    its share of the pool."""

    config = PolicyConfig.from_dict(
        {
            **ColdPoolPolicyLifecycle.config.model_dump(mode="json"),
            "lanes": [
                {**lane.model_dump(mode="json"), "slo": {"ttft_p95_s": 2.0}}
                if lane.name == "heavy"
                else lane.model_dump(mode="json")
                for lane in ColdPoolPolicyLifecycle.config.lanes
            ],
        }
    )

    def __init__(self) -> None:
        super().__init__()
        lanes = [lane.name for lane in self.config.lanes]
        forecast = OutputForecast(lanes, min_samples=1, tenant_min_samples=1)
        for lane in lanes:
            forecast.record(lane, 600)
        self.policy.reservations.outputs = forecast


WarmPoolPolicyLifecycle.TestCase.settings = settings(max_examples=100, stateful_step_count=60)
TestWarmPoolPolicyLifecycle = WarmPoolPolicyLifecycle.TestCase


class ReclaimPolicyLifecycle(PolicyLifecycle):
    """The lifecycle with KV, not seats, the engine's limit, no tenant caps
    and a share window of 2 s, so tenants go over their share and back
    within a run: a head of a tenant within its share that does not fit the
    pool before its first-token deadline takes the room of one start of a
    tenant over its share (``engine.reclaim``). Revoked requests end once,
    as ``revoked``, only ever running ones of tenants over their share, and
    only with a start of a tenant within its share in the same dispatch."""

    config = PolicyConfig.from_dict(
        {
            **_CONFIG.model_dump(mode="json"),
            # A first-token deadline (reclaim keeps only those) and room
            # for a burst in the queue.
            "lanes": [
                {**lane.model_dump(mode="json"), "slo": {"ttft_p95_s": 1.0}, "queue_capacity": 24}
                if lane.name == "interactive"
                else lane.model_dump(mode="json")
                for lane in _CONFIG.lanes
            ],
            "tiers": {"default": {}, "tiny": {"weight": 0.5}},
            "kv": {"num_blocks": 80, "block_size": 16},
            "engine": {"max_running": 32, "prefill_horizon_s": None, "share_window_s": 2.0},
        }
    )

    @rule(
        flooder=_TENANTS,
        asker=_TENANTS,
        count=st.integers(1, 16),
        prompt=st.integers(10, 200),
    )
    def squeeze(self, flooder: str, asker: str, count: int, prompt: int) -> None:
        """One tenant queues a burst, a dispatch starts what fits and every
        answer under way is 32 tokens along (the pool fills, as reserved and
        as held now); a moment later another tenant asks, and a moment after
        that (the demand refreshed) a dispatch."""
        for _ in range(count):
            self.submit(flooder, prompt, 32, "interactive", None)
        self.dispatch()
        for request_id in self._running_ids():
            self.policy.tokens(request_id, 32, now=self.now)
        self.now += 0.2
        self.submit(asker, prompt, 32, "interactive", None)
        self.now += 0.2
        self.dispatch()


ReclaimPolicyLifecycle.TestCase.settings = settings(max_examples=150, stateful_step_count=80)
TestReclaimPolicyLifecycle = ReclaimPolicyLifecycle.TestCase
