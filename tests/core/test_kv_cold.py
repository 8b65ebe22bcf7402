"""The fill: a head with a first-token deadline that the KV ledger's peak
holds back starts within the pool as held now (``Reservations.fill``) at the
cold start (until its lane has a forecast of its answers, each counts at its
ceiling) or where its tenant stays within its share of the pool; a lane
without a deadline waits, and a tenant past its share waits on the peak."""

from __future__ import annotations

from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.outcome import Hold
from slopolicy.core.policy.reservations import FILL


def _policy(output_quantile: str | None = "mean", share_window_s: float | None = 30.0) -> Policy:
    # 100 blocks of 16 tokens.
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": "chat", "slo": {"ttft_p95_s": 5.0}, "max_queue_wait_s": 600.0},
                {"name": "bulk", "max_queue_wait_s": 600.0},
            ],
            "kv": {"num_blocks": 100, "block_size": 16, "output_quantile": output_quantile},
            "engine": {"max_running": 64, "share_window_s": share_window_s},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _request(name: str, lane: str, prompt: int, max_new: int, tenant: str = "t") -> Request:
    return Request(id=name, tenant=tenant, prompt_tokens=prompt, max_new_tokens=max_new, lane=lane)


def _long_one_running(policy: Policy, now: float) -> None:
    """A bulk request holding 30 blocks now, at its ceiling 100 in 1,120 steps."""
    policy.submit(_request("long", "bulk", 480, 1120), now=now)
    (started,) = policy.dispatch(now=now).started
    policy.first_token(started.id, now=now + 0.5)  # its prompt is computed: nothing ahead


def test_a_cold_deadline_head_starts_within_the_pool_held_now_and_a_bulk_one_waits() -> None:
    policy = _policy()
    _long_one_running(policy, 0.0)
    # Each reserves its ceiling, 40 blocks for 624 steps, when the long one
    # holds 69: the peak (109) holds both back; the pool as held now (30 + 40)
    # is within FILL of it.
    assert FILL >= (30 + 40) / 100
    policy.submit(_request("bulk-2", "bulk", 16, 624), now=1.0)
    assert policy.dispatch(now=1.0).started == ()
    assert policy._entries["bulk-2"].held_by is Hold.KV
    policy.submit(_request("chat", "chat", 16, 624), now=1.0)
    assert [s.id for s in policy.dispatch(now=1.0).started] == ["chat"]
    kv = policy.statistics().kv
    assert kv.used_blocks == 31
    assert kv.peak_blocks > kv.num_blocks  # the engine may preempt, as under FCFS


def _warm(policy: Policy) -> None:
    """The chat lane's answers, 600 tokens each: past its cold start."""
    for i in range(16):
        policy.submit(_request(f"warm{i}", "chat", 16, 624), now=float(i))
        (started,) = policy.dispatch(now=float(i)).started
        policy.tokens(started.id, 600, now=float(i))
        policy.finish(started.id, now=float(i))


def test_past_the_cold_start_the_peak_binds_a_tenant_past_its_share() -> None:
    # Shares that follow the needs within a second.
    policy = _policy(share_window_s=0.5)
    _warm(policy)
    _long_one_running(policy, 20.0)
    # Forecast 600: 39 blocks for 600 steps, when the long one holds 68. The
    # tenant needs the long one's 100 and the chat's 39 of a pool of 100:
    # past its share (the whole pool) with the chat.
    policy.submit(_request("chat", "chat", 16, 624), now=21.0)
    assert policy.dispatch(now=21.0).started == ()
    assert policy._entries["chat"].held_by is Hold.KV
    shares = policy._dispatcher._kv_shares
    assert shares is not None
    assert shares.level == 100.0


def test_past_the_cold_start_a_tenant_within_its_share_fills() -> None:
    policy = _policy(share_window_s=0.5)
    _warm(policy)
    _long_one_running(policy, 20.0)
    # Tenant "t" past its share, tenant "u" within it: the shares' level is
    # what "u"'s averaged need (the chat's 39, a second old) leaves of the pool.
    policy.submit(_request("chat-u", "chat", 16, 624, tenant="u"), now=21.0)
    policy.submit(_request("chat-t", "chat", 16, 624), now=21.0)
    assert [s.id for s in policy.dispatch(now=21.0).started] == ["chat-u"]
    shares = policy._dispatcher._kv_shares
    assert shares is not None
    assert 39 <= shares.level < 100
    kv = policy.statistics().kv
    assert kv.used_blocks == 31  # the pool as held now: 30 + 1 (+ 39 at its forecast), within FILL
    assert kv.peak_blocks > kv.num_blocks  # the engine may preempt, as under FCFS
    policy.first_token("chat-u", now=21.5)  # its prompt is computed: nothing ahead
    assert policy.dispatch(now=21.5).started == ()
    assert policy._entries["chat-t"].held_by is Hold.KV


def test_while_the_needs_fit_the_pool_every_tenant_is_within_its_share() -> None:
    policy = _policy()  # a 30 s window: the long one is a second old in the averages
    _warm(policy)
    _long_one_running(policy, 20.0)
    policy.submit(_request("chat", "chat", 16, 624), now=21.0)
    assert [s.id for s in policy.dispatch(now=21.0).started] == ["chat"]
    shares = policy._dispatcher._kv_shares
    assert shares is not None
    assert shares.level == float("inf")


def test_without_shares_the_peak_binds_past_the_cold_start() -> None:
    policy = _policy(share_window_s=None)
    _warm(policy)
    _long_one_running(policy, 20.0)
    policy.submit(_request("chat", "chat", 16, 624), now=21.0)
    assert policy.dispatch(now=21.0).started == ()
    assert policy._entries["chat"].held_by is Hold.KV


def test_ceilings_asked_for_are_not_a_cold_start() -> None:
    policy = _policy(output_quantile=None)  # every answer at its ceiling, by choice
    _long_one_running(policy, 0.0)
    policy.submit(_request("chat", "chat", 16, 624), now=1.0)
    assert policy.dispatch(now=1.0).started == ()
    assert policy._entries["chat"].held_by is Hold.KV
