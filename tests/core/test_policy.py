from __future__ import annotations

import math

import pytest

from slopolicy import Admit, Defer, Demote, Policy, PolicyConfig, Reason, Reject, Request
from slopolicy.core.checks import shown
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.outcome import Outcome
from slopolicy.errors import UsageError


def _config(**overrides: object) -> PolicyConfig:
    data: dict[str, object] = {
        "lanes": [
            {
                "name": "interactive",
                "max_new_tokens": 64,
                "max_prompt_tokens": 500,
                "queue_capacity": 3,
                "max_queue_wait_s": 2.0,
                "weight": 4,
                "kv_reserve": 0.25,
            },
            {
                "name": "heavy",
                "max_new_tokens": 256,
                "max_prompt_tokens": 2000,
                "over_budget": "reject",
                "queue_capacity": 3,
                "max_queue_wait_s": 10.0,
                "weight": 1,
            },
        ],
        "tiers": {
            "default": {"rate": 1000.0, "burst": 4000.0, "max_concurrency": 4},
            "tiny": {"rate": 10.0, "burst": 100.0, "max_concurrency": 1},
        },
        "tenants": {"small": "tiny"},
        "kv": {"num_blocks": 40, "block_size": 16},
        "engine": {"max_running": 2},
    }
    data.update(overrides)
    return PolicyConfig.from_dict(data)


def _policy(**overrides: object) -> Policy:
    return Policy(_config(**overrides), counter=HeuristicCounter())


def test_the_api_sketch_runs() -> None:
    policy = Policy(PolicyConfig(), counter=HeuristicCounter())
    t = 100.0
    decision = policy.submit(
        Request(id="r1", tenant="acme", prompt_tokens=1200, max_new_tokens=256), now=t
    )
    assert isinstance(decision, Admit)
    started = list(policy.dispatch(now=t))
    assert [s.id for s in started] == ["r1"]
    assert started[0].queue_wait == 0
    policy.first_token("r1", now=t + 0.2)
    policy.tokens("r1", 240, now=t + 2.6)
    done = policy.finish("r1", now=t + 2.6, outcome="completed", output_tokens=240)
    assert done.outcome is Outcome.COMPLETED
    assert done.ttft == pytest.approx(0.2)
    assert done.tpot == pytest.approx(2.4 / 239)
    assert done.cost == 1200 + 2 * 240
    assert policy.phase("r1") is None
    stats = policy.statistics()
    assert stats.running == 0
    assert stats.kv.used_blocks == 0
    assert stats.outcomes[Outcome.COMPLETED] == 1


def test_quota_is_charged_the_actual_cost_at_the_end() -> None:
    policy = _policy()
    policy.submit(Request(id="a", tenant="t", prompt_tokens=100, max_new_tokens=64), now=0.0)
    policy.dispatch(now=0.0)
    before = policy.quotas.tenant("t", now=0.0)
    assert before is not None
    assert before.bucket is not None
    assert before.bucket.level == pytest.approx(4000 - (100 + 2 * 64))
    policy.finish("a", now=0.0, output_tokens=10)
    after = policy.quotas.tenant("t", now=0.0)
    assert after is not None
    assert after.bucket is not None
    assert after.bucket.level == pytest.approx(4000 - (100 + 2 * 10))
    assert after.in_flight == 0


def test_engine_slots_and_kv_bound_dispatch() -> None:
    policy = _policy()
    for name in "abc":
        policy.submit(Request(id=name, tenant=name, prompt_tokens=10, max_new_tokens=8), now=0.0)
    assert [s.id for s in policy.dispatch(now=0.0)] == ["a", "b"]  # max_running 2
    assert policy.phase("c") == "queued"
    policy.finish("a", now=1.0)
    assert [s.id for s in policy.dispatch(now=1.0)] == ["c"]


def test_background_lanes_never_take_the_interactive_reserve() -> None:
    policy = _policy(engine={"max_running": 10}, kv={"num_blocks": 100, "block_size": 16})
    # heavy may use the 75 shared blocks; each request below needs 42 (664 tokens).
    for name in "xy":
        decision = policy.submit(
            Request(id=name, tenant=name, prompt_tokens=600, max_new_tokens=64), now=0.0
        )
        assert isinstance(decision, Demote)
    assert [s.id for s in policy.dispatch(now=0.0)] == ["x"]
    chat = policy.submit(
        Request(id="chat", tenant="c", prompt_tokens=100, max_new_tokens=64), now=0.0
    )
    assert isinstance(chat, Admit)
    assert [s.id for s in policy.dispatch(now=0.0)] == ["chat"]


def test_a_request_larger_than_its_lane_can_ever_hold_is_refused() -> None:
    policy = _policy()
    decision = policy.submit(Request(tenant="t", prompt_tokens=1900, max_new_tokens=256), now=0.0)
    assert isinstance(decision, Reject)
    assert (decision.reason, decision.http_status) == (Reason.PROMPT_TOO_LONG, 413)
    assert "KV blocks" in decision.message


def test_full_queues_defer_with_retry_after() -> None:
    policy = _policy()
    for index in range(3):
        policy.submit(Request(tenant=f"t{index}", prompt_tokens=10, max_new_tokens=8), now=0.0)
    decision = policy.submit(Request(tenant="t9", prompt_tokens=10, max_new_tokens=8), now=0.0)
    assert isinstance(decision, Defer)
    assert (decision.reason, decision.http_status, decision.retry_after) == (
        Reason.QUEUE_FULL,
        503,
        2.0,
    )
    assert "queue is full" in decision.explain()
    stats = policy.statistics()
    assert stats.quotas.in_flight == 3  # the refused request holds nothing


def test_tenant_quotas_defer_or_reject() -> None:
    policy = _policy()
    first = policy.submit(Request(tenant="small", prompt_tokens=10, max_new_tokens=8), now=0.0)
    assert isinstance(first, Admit)
    busy = policy.submit(Request(tenant="small", prompt_tokens=10, max_new_tokens=8), now=0.0)
    assert isinstance(busy, Defer)
    assert (busy.reason, busy.http_status) == (Reason.CONCURRENCY_LIMITED, 429)
    too_big = policy.submit(Request(tenant="small", prompt_tokens=200, max_new_tokens=8), now=0.0)
    assert isinstance(too_big, Reject)
    assert too_big.reason is Reason.COST_OVER_BURST


def test_rate_limits_say_when_to_come_back() -> None:
    policy = _policy(tiers={"default": {"rate": 100.0, "burst": 200.0}}, tenants={})
    policy.submit(Request(tenant="t", prompt_tokens=150, max_new_tokens=10), now=0.0)
    decision = policy.submit(Request(tenant="t", prompt_tokens=150, max_new_tokens=10), now=0.0)
    assert isinstance(decision, Defer)
    assert decision.reason is Reason.RATE_LIMITED
    assert decision.retry_after == pytest.approx((170 - 30) / 100)


def test_queued_requests_expire_at_their_deadline() -> None:
    policy = _policy(engine={"max_running": 1})
    policy.submit(Request(id="run", tenant="a", prompt_tokens=10, max_new_tokens=8), now=0.0)
    policy.submit(Request(id="wait", tenant="b", prompt_tokens=10, max_new_tokens=8), now=0.0)
    policy.submit(
        Request(id="short", tenant="c", prompt_tokens=10, max_new_tokens=8, deadline=0.5), now=0.0
    )
    assert [s.id for s in policy.dispatch(now=0.0)] == ["run"]
    result = policy.dispatch(now=0.6)
    assert [f.id for f in result.expired] == ["short"]
    result = policy.dispatch(now=2.0)  # the lane's 2 s queue limit
    assert [(f.id, f.outcome) for f in result.expired] == [("wait", Outcome.EXPIRED)]
    assert result.expired[0].queue_wait is None
    assert result.expired[0].held_by is None  # every seat was taken: never tried
    assert policy.statistics().quotas.in_flight == 1


def test_cancel_works_queued_and_running() -> None:
    policy = _policy(engine={"max_running": 1})
    policy.submit(Request(id="a", tenant="a", prompt_tokens=10, max_new_tokens=8), now=0.0)
    policy.submit(Request(id="b", tenant="b", prompt_tokens=10, max_new_tokens=8), now=0.0)
    policy.dispatch(now=0.0)
    policy.tokens("a", 3, now=0.5)
    running = policy.cancel("a", now=1.0)
    queued = policy.cancel("b", now=1.0)
    assert (running.outcome, running.output_tokens) == (Outcome.CANCELLED, 3)
    assert (queued.outcome, queued.cost) == (Outcome.CANCELLED, 0.0)
    stats = policy.statistics()
    assert (stats.running, stats.kv.used_blocks, stats.quotas.in_flight) == (0, 0, 0)


def test_misuse_raises_and_changes_nothing() -> None:
    policy = _policy()
    policy.submit(Request(id="a", tenant="a", prompt_tokens=10, max_new_tokens=8), now=0.0)
    with pytest.raises(UsageError, match="already live"):
        policy.submit(Request(id="a", tenant="a", prompt_tokens=10, max_new_tokens=8), now=0.0)
    with pytest.raises(UsageError, match="still queued"):
        policy.finish("a", now=0.0)
    policy.dispatch(now=0.0)
    with pytest.raises(UsageError, match="completed, failed or cancelled"):
        policy.finish("a", now=0.0, outcome="expired")
    with pytest.raises(UsageError, match=">= 0"):
        policy.tokens("a", -1, now=0.0)
    policy.finish("a", now=0.0)
    with pytest.raises(UsageError, match="not live"):
        policy.finish("a", now=0.0)
    with pytest.raises(UsageError, match="not live"):
        policy.cancel("zzz", now=0.0)
    assert policy.statistics().outcomes[Outcome.COMPLETED] == 1


def test_ids_can_be_reused_once_ended() -> None:
    policy = _policy()
    for _ in range(3):
        policy.submit(Request(id="same", tenant="a", prompt_tokens=10, max_new_tokens=8), now=0.0)
        policy.cancel("same", now=0.0)
    assert policy.statistics().outcomes[Outcome.CANCELLED] == 3


def test_time_never_runs_backwards() -> None:
    policy = _policy()
    policy.submit(Request(id="a", tenant="a", prompt_tokens=10, max_new_tokens=8), now=5.0)
    policy.dispatch(now=4.0)  # treated as 5.0
    policy.first_token("a", now=3.0)
    done = policy.finish("a", now=6.0)
    assert done.ttft == 0.0
    assert done.queue_wait == 0.0


def test_a_now_that_is_not_a_finite_number_raises_and_changes_nothing() -> None:
    policy = _policy()
    request = Request(id="a", tenant="a", prompt_tokens=10, max_new_tokens=8)
    bad_values: tuple[object, ...] = (math.nan, math.inf, -math.inf, "1.0", None)
    for bad in bad_values:
        with pytest.raises(UsageError, match="finite number"):
            policy.submit(request, now=bad)  # type: ignore[arg-type]
    assert policy.statistics().submitted == 0
    policy.submit(request, now=1.0)
    policy.dispatch(now=1.0)
    with pytest.raises(UsageError, match="finite number"):
        policy.dispatch(now=math.inf)
    with pytest.raises(UsageError, match="finite number"):
        policy.tokens("a", 3, now=math.inf)
    with pytest.raises(UsageError, match="finite number"):
        policy.finish("a", now=math.inf, output_tokens=5)
    done = policy.finish("a", now=2.0)
    assert done.e2e == 1.0
    assert done.output_tokens == 0


# ``json.loads`` yields NaN; 10**400 and 2**53 + 1 are past every count; a
# string, a bool and a float are not counts at all.
_BAD_COUNTS: tuple[object, ...] = (math.nan, -1, "7", 10**400, 2**53 + 1, True, 1.5)


@pytest.mark.parametrize("bad", _BAD_COUNTS, ids=shown)
def test_a_bad_token_count_raises_before_anything_changes(bad: object) -> None:
    # Before: NaN passed tokens(), and finish() released the KV blocks, then
    # raised settling the quota: running and in flight stayed at 1 for good.
    policy = _policy()
    policy.submit(Request(id="a", tenant="a", prompt_tokens=10, max_new_tokens=8), now=1.0)
    policy.dispatch(now=1.0)
    policy.tokens("a", 3, now=1.5)
    before = policy.statistics()
    with pytest.raises(UsageError, match=r"^token count must be"):
        policy.tokens("a", bad, now=2.0)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"^output_tokens must be"):
        policy.finish("a", now=2.0, output_tokens=bad)  # type: ignore[arg-type]
    assert policy.statistics() == before
    assert policy.phase("a") == "running"
    done = policy.finish("a", now=3.0)  # the release a bad number must never skip
    assert done.output_tokens == 3
    assert done.e2e == 2.0  # the bad calls did not move the clock either
    stats = policy.statistics()
    assert stats.running == stats.quotas.in_flight == stats.kv.used_blocks == 0


@pytest.mark.parametrize(
    "bad", [1.7e18, 1.7e12, 10**400, -(10**400), math.nan, -math.inf], ids=shown
)
def test_a_bad_now_after_a_good_one_raises_and_changes_nothing(bad: float) -> None:
    # Before: 1.7e18 (time.time_ns()) was taken, and every later request
    # expired on arrival (now + wait == now in float); 10**400 was taken and
    # every later call raised OverflowError with quota held; NaN and -inf
    # after a finite now were quietly read as the latest now.
    policy = _policy()
    policy.submit(Request(id="a", tenant="a", prompt_tokens=10, max_new_tokens=8), now=1.0)
    before = policy.statistics()
    request = Request(id="b", tenant="a", prompt_tokens=10, max_new_tokens=8)
    for call in (
        lambda: policy.submit(request, now=bad),
        lambda: policy.dispatch(now=bad),
        lambda: policy.cancel("a", now=bad),
        lambda: policy.statistics(now=bad),
        lambda: policy.can_start(now=bad),
    ):
        with pytest.raises(UsageError, match=r"^now must be"):
            call()
    assert policy.statistics() == before
    assert [started.id for started in policy.dispatch(now=2.0)] == ["a"]
    assert policy.submit(request, now=2.5).accepted
    assert policy.finish("a", now=3.0).e2e == 2.0


def test_tenants_share_a_lane_fairly() -> None:
    policy = _policy(
        tiers={"default": {"rate": 1e9, "burst": 1e9, "max_concurrency": 1000}},
        tenants={},
        lanes=[{"name": "only", "queue_capacity": 1000}],
        engine={"max_running": 1},
        kv={"num_blocks": 10_000, "block_size": 16},
    )
    # 'big' sends requests ten times as costly as 'small'; both stay backlogged.
    served = {"big": 0.0, "small": 0.0}
    for index in range(60):
        policy.submit(Request(id=f"b{index}", tenant="big", prompt_tokens=1000), now=0.0)
        policy.submit(Request(id=f"s{index}", tenant="small", prompt_tokens=100), now=0.0)
    for step in range(40):
        (started,) = policy.dispatch(now=float(step)).started
        done = policy.finish(started.id, now=float(step), output_tokens=0)
        served[done.tenant] += done.cost
    # Equal service in cost units, within one large request.
    assert abs(served["big"] - served["small"]) <= 1000


def test_a_flood_of_tenant_ids_keeps_every_per_tenant_table_bounded() -> None:
    # TenantQuotas' own test feeds 10^6 ids; here every per-tenant table the
    # Policy holds (quotas, SLO trackers, fair-queue counters) stays bounded.
    config = _config(
        tiers={"default": {"rate": 1e9, "burst": 1e9, "max_concurrency": 10}},
        tenants={},
        engine={"max_running": 64},
        max_tenants=500,
    )
    policy = Policy(config, counter=HeuristicCounter())
    for index in range(20_000):
        now = index / 100
        policy.submit(Request(id=f"r{index}", tenant=f"t{index}", prompt_tokens=10), now=now)
        for started in policy.dispatch(now=now):
            policy.finish(started.id, now=now, output_tokens=1)
    assert policy.statistics().quotas.tenants <= 500
    assert policy.slo_trackers.tenant_count <= 1024
    assert policy._queues.queue("interactive").statistics().idle_counters <= 10_000


def test_a_lane_cap_bounds_what_runs_but_not_other_lanes() -> None:
    policy = _policy(
        engine={"max_running": 10},
        kv={"num_blocks": 1000, "block_size": 16},
        lanes=[
            {"name": "interactive", "max_prompt_tokens": 500, "weight": 4},
            {"name": "heavy", "max_running": 1},
        ],
    )
    for name in ("h1", "h2"):
        policy.submit(Request(id=name, tenant=name, prompt_tokens=900, max_new_tokens=8), now=0.0)
    policy.submit(Request(id="chat", tenant="c", prompt_tokens=10, max_new_tokens=8), now=0.0)
    assert sorted(s.id for s in policy.dispatch(now=0.0)) == ["chat", "h1"]
    policy.finish("h1", now=1.0)
    assert [s.id for s in policy.dispatch(now=1.0)] == ["h2"]


def test_a_quota_held_elsewhere_is_neither_taken_nor_settled_here() -> None:
    policy = _policy()
    policy.delegate_quota()
    assert policy.quota_delegated
    small = {"prompt_tokens": 10, "max_new_tokens": 8}
    decision = policy.prepare(Request(id="a", tenant="small", **small), now=0.0)  # type: ignore[arg-type]
    assert isinstance(decision, Admit)
    assert policy.phase("a") is None  # prepared, not queued
    assert policy.enqueue(decision, now=0.0) is decision
    # 'small' may only have one request in flight, but its quota lives elsewhere.
    second = policy.submit(Request(tenant="small", **small), now=0.0)  # type: ignore[arg-type]
    assert isinstance(second, Admit)
    policy.dispatch(now=0.0)
    done = policy.finish("a", now=1.0, output_tokens=4)
    assert done.cost == 10 + 2 * 4  # the caller settles its store with this
    assert policy.statistics().quotas.in_flight == 0


def test_the_quota_is_delegated_only_while_nothing_is_live() -> None:
    policy = _policy()
    policy.submit(Request(id="a", prompt_tokens=10, max_new_tokens=8), now=0.0)
    with pytest.raises(UsageError, match="before any request is live"):
        policy.delegate_quota()
    assert not policy.quota_delegated


def test_a_prepared_decision_gets_exactly_one_outcome() -> None:
    policy = _policy()
    decision = policy.prepare(Request(id="a", prompt_tokens=10, max_new_tokens=8), now=0.0)
    assert isinstance(decision, Admit)
    with pytest.raises(UsageError, match="already live"):  # prepared: its id is live
        policy.submit(Request(id="a", prompt_tokens=10), now=0.0)
    with pytest.raises(UsageError, match=r"^now must be"):  # a bad call resolves nothing
        policy.enqueue(decision, now=math.nan)
    policy.withdraw(decision, now=0.0)
    for second in (
        lambda: policy.enqueue(decision, now=0.0),
        lambda: policy.refuse(decision, Reason.RATE_LIMITED, "x", now=0.0),
        lambda: policy.withdraw(decision, now=0.0),
    ):
        with pytest.raises(UsageError, match="no prepared decision awaiting an outcome"):
            second()
    assert policy.statistics().outcomes[Outcome.CANCELLED] == 1
    assert policy.phase("a") is None
    # A decision from another policy, or one submit already queued, has none either.
    queued = policy.submit(Request(id="b", prompt_tokens=10), now=0.0)
    assert isinstance(queued, Admit)
    with pytest.raises(UsageError, match="no prepared decision"):
        policy.enqueue(queued, now=0.0)


def test_decisions_carry_the_rungs_the_ladder_applied() -> None:
    policy = _policy(ladder={"dwell_s": 1.0, "kv_usage": {"enter": 0.01, "exit": 0.005}})
    policy.submit(Request(id="a", tenant="t", prompt_tokens=300, max_new_tokens=64), now=0.0)
    policy.dispatch(now=0.0)
    policy.evaluate(now=0.0)  # KV above 1%: the first rung goes on (favor_interactive)...
    policy.evaluate(now=1.0)  # ...and a dwell later the second (drop_optional_features)
    decision = policy.submit(Request(id="b", tenant="u", prompt_tokens=10, n=3), now=1.5)
    assert isinstance(decision, Admit)
    assert decision.rungs == ("drop_optional_features",)
    assert decision.request.n == 1
    assert "rung drop_optional_features applied" in decision.explain()
    (started,) = policy.dispatch(now=1.5).started
    assert started.rungs == ("drop_optional_features",)


def test_next_deadline_is_the_earliest_queued_deadline() -> None:
    policy = _policy(engine={"max_running": 1})
    assert policy.next_deadline() is None
    policy.submit(Request(id="a", tenant="a", prompt_tokens=10, max_new_tokens=8), now=0.0)
    policy.submit(Request(id="b", tenant="b", prompt_tokens=10, max_new_tokens=8), now=1.0)
    policy.submit(
        Request(id="c", tenant="c", prompt_tokens=10, max_new_tokens=8, deadline=2.5), now=1.0
    )
    assert policy.next_deadline() == 2.0  # a: the lane's 2 s wait
    assert [s.id for s in policy.dispatch(now=1.0)] == ["a"]  # a leaves the queue
    assert policy.next_deadline() == 2.5  # c's own deadline beats b's 3.0
    policy.cancel("c", now=1.0)
    assert policy.next_deadline() == 3.0
    policy.cancel("b", now=1.0)
    assert policy.next_deadline() is None


def test_dispatch_bounds_the_expiries_it_does_and_starts_nothing_overdue() -> None:
    policy = _policy(
        engine={"max_running": 1},
        lanes=[{"name": "only", "queue_capacity": 10, "max_queue_wait_s": 1.0}],
    )
    for k in range(6):
        policy.submit(
            Request(id=f"r{k}", tenant=f"t{k}", prompt_tokens=10, max_new_tokens=8), now=0.0
        )
    policy.submit(Request(id="fresh", tenant="f", prompt_tokens=10, max_new_tokens=8), now=0.5)
    first = policy.dispatch(now=1.0, max_expired=4)
    assert [f.id for f in first.expired] == ["r0", "r1", "r2", "r3"]
    assert first.started == ()  # r4 and r5 are overdue: nothing may start yet
    second = policy.dispatch(now=1.0, max_expired=4)
    assert [f.id for f in second.expired] == ["r4", "r5"]
    assert [s.id for s in second] == ["fresh"]
    assert all(f.outcome is Outcome.EXPIRED for f in (*first.expired, *second.expired))
    for bad in (0, 2.5, True):
        with pytest.raises(UsageError):
            policy.dispatch(now=1.0, max_expired=bad)  # type: ignore[arg-type]


def test_exactly_max_expired_overdue_still_starts_the_rest() -> None:
    policy = _policy(
        engine={"max_running": 1},
        lanes=[{"name": "only", "queue_capacity": 10, "max_queue_wait_s": 1.0}],
    )
    for k in range(2):
        policy.submit(
            Request(id=f"r{k}", tenant=f"t{k}", prompt_tokens=10, max_new_tokens=8), now=0.0
        )
    policy.submit(Request(id="fresh", tenant="f", prompt_tokens=10, max_new_tokens=8), now=0.5)
    result = policy.dispatch(now=1.0, max_expired=2)
    assert len(result.expired) == 2
    assert [s.id for s in result] == ["fresh"]


def test_ended_requests_are_not_kept_for_the_ladder_without_one() -> None:
    # Regression: the watched lane's arrival index was pruned only when the
    # ladder evaluated, so without a ladder it kept every request ever seen.
    policy = _policy(ladder={"enabled": False}, engine={"max_running": 1})
    policy.submit(Request(id="stuck", tenant="s", prompt_tokens=10, max_new_tokens=8), now=0.0)
    policy.dispatch(now=0.0)
    policy.submit(Request(id="head", tenant="h", prompt_tokens=10, max_new_tokens=8), now=0.0)
    for k in range(500):
        policy.submit(Request(id=f"r{k}", tenant="t", prompt_tokens=10, max_new_tokens=8), now=0.0)
        policy.cancel(f"r{k}", now=0.0)
    # "head" stays queued the whole time: the index is rebuilt, not just popped.
    arrivals = policy._deadlines._fifos[policy.health.watch_lane]
    assert len(arrivals.entries) <= 130
    policy.finish("stuck", now=0.0)
    (started,) = policy.dispatch(now=0.0)
    policy.finish(started.id, now=0.0)
    policy.submit(Request(id="last", tenant="t", prompt_tokens=10, max_new_tokens=8), now=0.0)
    assert [entry.id for entry in arrivals.entries] == ["last"]


def test_a_dispatch_has_no_truth_value_only_explicit_answers() -> None:
    policy = _policy()
    idle = policy.dispatch(now=0.0)
    with pytest.raises(TypeError, match="no truth value"):
        bool(idle)
    assert not idle.changed
    policy.submit(Request(id="a", prompt_tokens=10, max_new_tokens=8), now=0.0)
    started = policy.dispatch(now=0.0)
    assert started.changed
    assert [s.id for s in started] == ["a"]


def _favour_order(slo: dict[str, float], ladder: dict[str, object], step: float) -> list[str]:
    """The order four queued requests (batch, chat, batch, chat; sent at 0.1 s)
    start in, one at a time from 0.2 s, ``step`` seconds apart, on a one-seat
    engine whose chat lane was charged a 3,000-token hold; chat and batch
    have equal weights, the ``slo`` given and the ``ladder`` settings given."""
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": "chat", "weight": 1, "slo": slo},  # a share no larger than batch's
                {"name": "batch", "weight": 1, "slo": slo},
            ],
            "engine": {"max_running": 1, "prefill_horizon_s": 0},
            "ladder": {"dwell_s": 1.0, **ladder},
        }
    )
    policy = Policy(config, counter=HeuristicCounter())
    hold = Request(id="hold", tenant="t", prompt_tokens=3000, max_new_tokens=64, lane="chat")
    policy.submit(hold, now=0.0)
    assert [s.id for s in policy.dispatch(now=0.0)] == ["hold"]
    policy.evaluate(now=0.0)
    for name, lane in (("b0", "batch"), ("c0", "chat"), ("b1", "batch"), ("c1", "chat")):
        request = Request(id=name, tenant=name, prompt_tokens=10, max_new_tokens=8, lane=lane)
        assert policy.submit(request, now=0.1).accepted
    started: list[str] = []
    running, now = "hold", 0.2
    while True:
        policy.finish(running, now=now, output_tokens=8)
        (running,) = [s.id for s in policy.dispatch(now=now)] or [""]
        if not running:
            return started
        started.append(running)
        now += step


def _pressure(on: bool) -> dict[str, object]:
    """Ladder settings whose KV trigger is hot from the first evaluation (or never)."""
    return {"kv_usage": {"enter": 0.001 if on else 0.99, "exit": 0.0005}}


def test_under_pressure_the_interactive_lanes_start_first_whatever_their_share() -> None:
    """``favor_interactive``, the ladder's first rung: queued chat starts
    before batch work that its fair share would send first; nothing is
    refused. (Without a TTFT target, chat is favoured at once.)"""
    assert _favour_order({}, _pressure(True), 0.1) == ["c0", "c1", "b0", "b1"]
    # Without pressure, the shares' order: chat's lane was charged the 3,000-token hold.
    assert _favour_order({}, _pressure(False), 0.1) == ["b0", "b1", "c0", "c1"]


def test_under_pressure_only_the_interactive_requests_at_risk_start_first() -> None:
    """``favor_interactive`` puts a queued chat request first only once it has
    waited ``favor_after_fraction`` of chat's TTFT target; before that, the
    lanes' usual order holds (here: the shares', chat having been charged the hold)."""
    slo = {"ttft_p95_s": 1.0}

    def order(favor_after: float, step: float = 0.25) -> list[str]:
        return _favour_order(slo, _pressure(True) | {"favor_after_fraction": favor_after}, step)

    # At 0.2 s the chat requests have waited 0.1 s, under a quarter of their
    # 1 s target: batch's turn by the shares. From 0.45 s they have waited 0.35 s.
    assert order(0.25) == ["b0", "c0", "c1", "b1"]
    # Every chat request at once (the rung before favor_after existed).
    assert order(0.0) == ["c0", "c1", "b0", "b1"]
    # Never at risk in time: the shares' order throughout.
    assert order(1.0, step=0.1) == ["b0", "b1", "c0", "c1"]
