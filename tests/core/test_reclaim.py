"""Reclaim: a tenant within its share whose head does not fit the KV pool
gets room from one running request of a tenant over its share, the latest
started that makes room alone, revoked in the same dispatch
(``engine.reclaim``; the dispatcher)."""

from __future__ import annotations

import pytest

from slopolicy import Outcome, Policy, UsageError
from slopolicy.core.lifecycle import Dispatch
from tests.core.pools import one_lane_policy, submit

#: big's starts, one a second: four of 20 blocks, then four of 5 (the pool's 100).
BIG = [264] * 4 + [24] * 4


def _big_fills_the_pool(policy: Policy, *, more: bool = False) -> None:
    """``big`` fills the pool with :data:`BIG` (and, ``more``, queues one
    more request of 5 blocks at 20 s)."""
    for k, prompt in enumerate(BIG):
        submit(policy, f"big-{k}", "big", prompt, now=float(k))
        assert [s.id for s in policy.dispatch(now=float(k)).started] == [f"big-{k}"]
    if more:
        submit(policy, "big-8", "big", 24, now=20.0)
        assert policy.dispatch(now=20.0).started == ()


def _small_arrives(policy: Policy, prompt: int = 264) -> Dispatch:
    """``small`` queues one request (20 blocks at 264 tokens) at 21 s; the
    dispatch at 23 s, after the demand's next refresh (every 1.5 s) counted it."""
    submit(policy, "small-0", "small", prompt, now=21.0)
    return policy.dispatch(now=23.0)


def test_the_latest_over_share_start_that_makes_room_is_revoked() -> None:
    policy = one_lane_policy()
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
    policy = one_lane_policy()
    _big_fills_the_pool(policy)
    policy.first_token("big-3", now=20.5)
    policy.tokens("big-3", 7, now=20.5)
    (revoked,) = _small_arrives(policy).revoked
    assert (revoked.id, revoked.output_tokens) == ("big-3", 7)
    assert revoked.ttft == pytest.approx(17.5)
    assert revoked.e2e == pytest.approx(20.0)


def test_nothing_is_revoked_with_reclaim_off() -> None:
    policy = one_lane_policy(reclaim=False)
    _big_fills_the_pool(policy)
    result = _small_arrives(policy)
    assert result.revoked == ()
    assert result.started == ()


def test_nothing_is_revoked_without_a_share_window() -> None:
    policy = one_lane_policy(share_window_s=None)
    _big_fills_the_pool(policy)
    result = _small_arrives(policy)
    assert result.revoked == ()
    assert result.started == ()


def test_a_tenant_alone_is_never_revoked() -> None:
    # Nobody within a share waits: big's queued request waits for an end.
    policy = one_lane_policy()
    _big_fills_the_pool(policy, more=True)
    for second in range(21, 60):
        result = policy.dispatch(now=float(second))
        assert result.revoked == ()
        assert result.started == ()


def test_nothing_is_revoked_when_no_one_revocation_makes_room() -> None:
    # big holds only 5-block requests: small's 20 blocks would take four
    # revocations, four requests lost for one let in, so small waits.
    policy = one_lane_policy()
    for k in range(20):
        submit(policy, f"big-{k}", "big", 24, now=float(k))
        assert len(policy.dispatch(now=float(k)).started) == 1
    result = _small_arrives(policy)
    assert result.revoked == ()
    assert result.started == ()
    assert policy.statistics().running == 20


def test_a_head_behind_an_over_share_head_of_its_lane_waits() -> None:
    # big's queued request, shorter, heads the lane and does not fit; it is
    # over its share, so nothing is revoked for it, and small's request
    # behind it waits (the lane's head is never skipped for want of KV).
    policy = one_lane_policy()
    _big_fills_the_pool(policy, more=True)
    result = _small_arrives(policy)
    assert result.revoked == ()
    assert result.started == ()


def test_a_head_of_the_same_tenant_takes_nothing_from_its_own() -> None:
    # small's second request waits behind its first: small's own running
    # request is never revoked for it, nor is anything of a tenant within
    # its share.
    policy = one_lane_policy()
    _big_fills_the_pool(policy)
    assert [s.id for s in _small_arrives(policy).started] == ["small-0"]
    submit(policy, "small-1", "small", 264, now=24.0)
    revoked = policy.dispatch(now=26.0).revoked
    assert all(f.tenant == "big" for f in revoked)
