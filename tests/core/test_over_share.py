"""A start says whether, with the KV pool contended, its tenant was over its
max-min share of a saturated engine (``Started.over_share``), so the host can
tell the engine to preempt those requests first (issue 18: over-share tenants
absorb the overload, in the engine's preemptions too)."""

from __future__ import annotations

import math

from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter


def _policy(share_window_s: float | None = 10.0, num_blocks: int = 2000) -> Policy:
    """Three seats; 2,000 blocks of 16 tokens hold six of the 5,100-token
    requests below, so a flood of them over-asks the pool."""
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": "chat", "slo": {"ttft_p95_s": 0.5}, "max_prompt_tokens": 1000},
                {"name": "batch", "max_prompt_tokens": 100_000, "max_queue_wait_s": 600},
            ],
            # These starts report no first token: no prefill budget holding them.
            "engine": {"max_running": 3, "share_window_s": share_window_s, "prefill_horizon_s": 0},
            "kv": {"num_blocks": num_blocks},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _batch(request_id: str, tenant: str) -> Request:
    return Request(id=request_id, tenant=tenant, prompt_tokens=5000, max_new_tokens=100)


def _flood(policy: Policy) -> list[str]:
    """``big`` queues 30 requests and ``small`` one; the first dispatch starts
    three (the engine has kept up so far: none is over its share). Returns
    their ids."""
    for index in range(30):
        assert policy.submit(_batch(f"big{index}", "big"), now=0.0).accepted
    assert policy.submit(_batch("small0", "small"), now=0.0).accepted
    started = policy.dispatch(now=0.0).started
    assert [s.over_share for s in started] == [False, False, False]
    return [s.id for s in started]


def _replace(policy: Policy, finished: list[str], now: float) -> set[tuple[str, bool]]:
    for request_id in finished:
        policy.finish(request_id, now=now, outcome="completed", output_tokens=100)
    return {(s.id, s.over_share) for s in policy.dispatch(now=now).started}


def test_a_start_over_its_tenant_s_share_says_so_and_one_within_does_not() -> None:
    policy = _policy()
    running = _flood(policy)
    # 31 asked of a saturated engine that serves 3: big is far over its share.
    assert _replace(policy, running[:1], 1.0) == {("big2", True)}
    # small's next request is within small's share (it asked for 2 of 3 served).
    assert policy.submit(_batch("small1", "small"), now=1.5).accepted
    assert _replace(policy, running[1:], 2.0) == {("small1", False), ("big3", True)}


def test_where_the_pool_is_not_contended_no_start_is_over_share() -> None:
    """The default pool (26,688 blocks) holds the whole flood, and the three
    running are forecast to hold 4% of it: no preemption is to come, the
    engine's queue order is what a priority would move, and it stays the
    lanes'."""
    policy = _policy(num_blocks=26_688)
    running = _flood(policy)
    shares = policy._dispatcher._kv_shares
    assert shares is not None
    assert shares.level == math.inf
    assert _replace(policy, running[:1], 1.0) == {("big2", False)}


def test_without_share_protection_no_start_is_over_share() -> None:
    policy = _policy(share_window_s=None)
    running = _flood(policy)
    assert _replace(policy, running[:1], 1.0) == {("big2", False)}


def test_the_pool_is_contended_by_its_needs_or_by_its_forecast_peak() -> None:
    """Three running 319-block requests in a 1,000-block pool: their needs fit
    it (the shares' level is infinite), but their forecast peak passes 80%
    of it; two do not."""
    for count, contended in ((2, False), (3, True)):
        policy = _policy(num_blocks=1000)
        dispatcher = policy._dispatcher
        shares = dispatcher._kv_shares
        for index in range(count):
            assert policy.submit(_batch(f"a{index}", "a"), now=0.0).accepted
        assert not dispatcher._contended(shares)  # nothing runs yet
        assert len(policy.dispatch(now=0.0).started) == count
        assert shares is not None
        assert shares.level == math.inf
        assert dispatcher._contended(shares) is contended
        assert not dispatcher._contended(None)  # no share protection
    # A flood's queued needs exceed the pool: contended at any peak.
    policy = _policy(num_blocks=26_688 // 20)
    _flood(policy)
    shares = policy._dispatcher._kv_shares
    assert shares is not None
    assert shares.level < math.inf
    assert policy._dispatcher._contended(shares)
