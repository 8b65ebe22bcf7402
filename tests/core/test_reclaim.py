"""Reclaim: a tenant within its share whose head does not fit the KV pool
gets room from one running request of a tenant over its share, the latest
started that makes room alone, revoked in the same dispatch
(``engine.reclaim``; the dispatcher)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from slopolicy import EngineSignals, Outcome, Policy, UsageError
from slopolicy.core.lifecycle import Dispatch
from tests.core.pools import one_lane_policy, submit

#: The lane's TTFT target (seconds): the deadline a revocation keeps.
TTFT = 5.0
#: big's starts, one a second: four of 20 blocks, then four of 5 (the pool's 100).
BIG = [264] * 4 + [24] * 4


def _big_fills_the_pool(policy: Policy, *, more: bool = False, start: float = 0.0) -> None:
    """``big`` fills the pool with :data:`BIG` from ``start`` seconds, each
    request 40 tokens into its answer at once, so the pool as held now is
    full too (and, ``more``, queues one more request of 5 blocks at 20 s)."""
    for k, prompt in enumerate(BIG):
        name, at = f"big-{k}", start + k
        submit(policy, name, "big", prompt, now=at)
        assert [s.id for s in policy.dispatch(now=at).started] == [name]
        policy.first_token(name, now=at)
        policy.tokens(name, 40, now=at)
    if more:
        submit(policy, "big-8", "big", 24, now=20.0)
        assert policy.dispatch(now=20.0).started == ()


def _small_arrives(policy: Policy, prompt: int = 264) -> Dispatch:
    """``small`` queues one request (20 blocks at 264 tokens) at 21 s; the
    dispatch at 23 s, after the demand's next refresh (every 1.5 s) counted it."""
    submit(policy, "small-0", "small", prompt, now=21.0)
    return policy.dispatch(now=23.0)


def test_the_latest_over_share_start_that_makes_room_is_revoked() -> None:
    policy = one_lane_policy(TTFT)
    _big_fills_the_pool(policy)
    result = _small_arrives(policy)
    # big and small together ask for more than the engine served: big is
    # over its share, small within it. small's 20 blocks come from one of
    # big's requests: the latest started of those that free 20 blocks alone
    # (big's four later starts of 5 blocks would take four revocations).
    assert policy.demand is not None
    assert policy.demand.over("big", now=23.0)
    assert not policy.demand.over("small", now=23.0)
    assert [f.id for f in result.revoked] == ["big-3"]
    assert [s.id for s in result.started] == ["small-0"]
    assert result.changed
    for finished in result.revoked:
        assert finished.outcome is Outcome.REVOKED
        assert finished.tenant == "big"
        assert finished.finished_at == 23.0
    statistics = policy.statistics()
    assert statistics.outcomes[Outcome.REVOKED] == 1
    assert statistics.running == 8
    assert statistics.kv.used_blocks <= statistics.kv.num_blocks
    # A revoked request has ended: the host cannot end it again.
    with pytest.raises(UsageError):
        policy.finish("big-3", now=23.5)


def test_its_tokens_are_charged_to_its_tenant() -> None:
    # big-3's 40 tokens so far are what it was served: its record's count.
    policy = one_lane_policy(TTFT)
    _big_fills_the_pool(policy)
    (revoked,) = _small_arrives(policy).revoked
    assert (revoked.id, revoked.output_tokens) == ("big-3", 40)
    assert revoked.ttft == pytest.approx(0.0)
    assert revoked.e2e == pytest.approx(20.0)


def test_the_engine_frees_a_revoked_request_at_once() -> None:
    # The engine reads 95 blocks used where the ledger holds 92 (its excess,
    # 3, counts against every start). It aborts big-3 now, so its 19 blocks
    # leave that reading at once and small's 16 fit beside the rest's peak.
    policy = one_lane_policy(TTFT)
    _big_fills_the_pool(policy)
    policy.observe(EngineSignals(observed_at=20.5, kv_usage=0.95), now=20.5)
    result = _small_arrives(policy, prompt=200)
    assert [f.id for f in result.revoked] == ["big-3"]
    assert [s.id for s in result.started] == ["small-0"]
    assert policy.statistics().kv.engine_used_blocks == 95 - 19


def test_nothing_is_revoked_where_the_engines_excess_leaves_no_room() -> None:
    # The engine holds the whole pool (8 blocks past the ledger): without
    # big-3 the rest's peak and small's 20 blocks come to 100, past the 92
    # left, so no revocation lets small in and none is made.
    policy = one_lane_policy(TTFT)
    _big_fills_the_pool(policy)
    policy.observe(EngineSignals(observed_at=20.5, kv_usage=1.0), now=20.5)
    result = _small_arrives(policy)
    assert result.revoked == ()
    assert result.started == ()
    assert policy.statistics().running == 8


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(lambda: one_lane_policy(TTFT, reclaim=False), id="reclaim off"),
        pytest.param(lambda: one_lane_policy(TTFT, share_window_s=None), id="no share window"),
        pytest.param(lambda: one_lane_policy(), id="no first-token deadline"),
    ],
)
def test_nothing_is_revoked_where_reclaim_does_not_act(policy: Callable[[], Policy]) -> None:
    # Reclaim off, no share window (no demand estimate), or a head with no
    # first-token deadline to keep: small waits for an end.
    made = policy()
    _big_fills_the_pool(made)
    result = _small_arrives(made)
    assert result.revoked == ()
    assert result.started == ()


def test_a_tenant_alone_is_never_revoked() -> None:
    # Nobody within a share waits: big's queued request waits for an end.
    policy = one_lane_policy(TTFT)
    _big_fills_the_pool(policy, more=True)
    for second in range(21, 60):
        result = policy.dispatch(now=float(second))
        assert result.revoked == ()
        assert result.started == ()


def test_nothing_is_revoked_when_no_one_revocation_makes_room() -> None:
    # big holds only 5-block requests: small's 20 blocks would take four
    # revocations, four requests lost for one let in, so small waits.
    policy = one_lane_policy(TTFT)
    for k in range(20):
        submit(policy, f"big-{k}", "big", 24, now=float(k))
        assert len(policy.dispatch(now=float(k)).started) == 1
        policy.tokens(f"big-{k}", 40, now=float(k))  # the pool as held now is full too
    result = _small_arrives(policy)
    assert result.revoked == ()
    assert result.started == ()
    assert policy.statistics().running == 20


def test_a_head_the_pools_own_ends_make_room_for_in_time_waits() -> None:
    # big's answers end at 20 blocks a second lately: small's 20 blocks come
    # in about a second, well within its 5 s target, so nothing is revoked.
    policy = one_lane_policy(TTFT)
    for k in range(40):  # ten of 20 blocks and thirty of 5, a start and an end each 0.25 s
        at = k / 4
        submit(policy, f"warm-{k}", "big", 264 if k % 4 == 0 else 24, now=at)
        assert len(policy.dispatch(now=at).started) == 1
        policy.finish(f"warm-{k}", now=at)
    assert policy.turnover is not None
    assert policy.turnover.wait(20, now=10.0) < 2.0
    _big_fills_the_pool(policy, start=10.0)
    submit(policy, "small-0", "small", 264, now=21.0)
    result = policy.dispatch(now=23.0)
    assert result.revoked == ()
    assert result.started == ()


def test_a_head_is_looked_at_again_when_the_ends_would_no_longer_come_in_time() -> None:
    # As above, with no ladder ticking: no event comes after 23 s. As none
    # comes, the pace of big's ends falls and small's deadline (26 s) nears,
    # so the policy asks for a dispatch (next_wakeup) when waiting for them
    # would make small late, and that dispatch, not one before, revokes.
    policy = one_lane_policy(TTFT, ladder=False)
    for k in range(40):
        at = k / 4
        submit(policy, f"warm-{k}", "big", 264 if k % 4 == 0 else 24, now=at)
        assert len(policy.dispatch(now=at).started) == 1
        policy.finish(f"warm-{k}", now=at)
    _big_fills_the_pool(policy, start=10.0)
    submit(policy, "small-0", "small", 264, now=21.0)
    assert policy.dispatch(now=23.0).revoked == ()
    assert policy.turnover is not None
    wake = policy.next_wakeup(now=23.0)
    assert wake is not None
    # small reserves 17 blocks now (its answer forecast from big's 40-token
    # ones) and none is free.
    assert policy.kv.free_blocks("chat") == 0
    assert wake == policy.turnover.late_from(17, by=21.0 + TTFT, now=23.0)
    assert 23.0 < wake < 21.0 + TTFT
    assert not policy.turnover.late(17, by=21.0 + TTFT, now=math.nextafter(wake, 0.0))
    assert policy.turnover.late(17, by=21.0 + TTFT, now=wake)
    before = policy.dispatch(now=math.nextafter(wake, 0.0))
    assert before.revoked == ()
    assert before.started == ()
    result = policy.dispatch(now=wake)
    assert [f.id for f in result.revoked] == ["big-3"]
    assert [s.id for s in result.started] == ["small-0"]


def test_a_held_head_of_a_tenant_over_its_share_is_looked_at_again_at_the_next_estimate() -> None:
    # small's second request, held for KV with small over its share, may be
    # owed room once the demand estimate moves: the policy asks for a
    # dispatch at its next refresh (every 1.5 s of a 30 s window), not only
    # at the request's deadline (29 s), with no ladder ticking.
    policy = one_lane_policy(TTFT, ladder=False)
    _big_fills_the_pool(policy)
    assert [s.id for s in _small_arrives(policy).started] == ["small-0"]
    policy.first_token("small-0", now=23.5)
    policy.tokens("small-0", 40, now=23.5)
    submit(policy, "small-1", "small", 264, now=24.0)
    assert policy.dispatch(now=26.0).started == ()
    assert policy.demand is not None
    assert policy.demand.over("small", now=26.0)
    assert policy.next_wakeup(now=26.0) == 27.0


def test_a_head_behind_an_over_share_head_of_its_lane_waits() -> None:
    # big's queued request, shorter, heads the lane and does not fit; it is
    # over its share, so nothing is revoked for it, and small's request
    # behind it waits (the lane's head is never skipped for want of KV).
    policy = one_lane_policy(TTFT)
    _big_fills_the_pool(policy, more=True)
    result = _small_arrives(policy)
    assert result.revoked == ()
    assert result.started == ()


def test_a_tenant_that_comes_to_ask_past_its_share_takes_nothing() -> None:
    # small's first request took big's room; its second, once the first is
    # under way, puts small over its share too: it is owed nothing, and
    # waits for an end like any head.
    policy = one_lane_policy(TTFT)
    _big_fills_the_pool(policy)
    assert [s.id for s in _small_arrives(policy).started] == ["small-0"]
    policy.first_token("small-0", now=23.5)
    policy.tokens("small-0", 40, now=23.5)
    submit(policy, "small-1", "small", 264, now=24.0)
    result = policy.dispatch(now=26.0)
    assert policy.demand is not None
    assert policy.demand.over("small", now=26.0)
    assert result.revoked == ()
    assert result.started == ()
