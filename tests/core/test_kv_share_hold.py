"""A tenant past its share of an over-asked KV pool starts only from room no
other tenant is owed (counting the requests that gave up waiting for the
pool), and the lane's next tenant goes instead (slopolicy.core.kv.shares,
wired in the dispatcher)."""

from __future__ import annotations

from slopolicy import EngineSignals, Hold, Policy, Request
from tests.core.pools import one_lane_policy, submit


def _fill(policy: Policy, *, small: bool) -> list[str]:
    """``big`` fills the pool with twenty 5-block requests and queues one
    more; ``small`` (if asked) queues a 20-block one while the pool is full;
    four of big's end at 300 s, and the ids started then are returned."""
    for k in range(21):
        submit(policy, f"big-{k}", "big", 24, now=0.0)
    assert len(policy.dispatch(now=0.0).started) == 20
    if small:
        submit(policy, "small-0", "small", 264, now=0.1)
    for second in range(1, 300):
        assert policy.dispatch(now=float(second)).started == ()  # held: saturated
    for k in range(4):
        policy.finish(f"big-{k}", now=300.0, output_tokens=56)
    return [started.id for started in policy.dispatch(now=300.0).started]


def test_the_owed_tenant_starts_in_place_of_the_one_past_its_share() -> None:
    policy = one_lane_policy()
    # big's last request heads the lane (the shorter prompt) and fits the
    # 20 freed blocks. But big has needed 105 blocks and small 20 of 100:
    # big's share is 80, and it holds 80. A start of 5 more would leave 15
    # free of the 20 small is owed, so small starts instead.
    assert _fill(policy, small=True) == ["small-0"]
    statistics = policy.statistics()
    assert statistics.saturation is not None
    assert statistics.saturation > 0.5
    # small's request ends: its need (20 blocks lately) is owed it again,
    # and big's last still waits on its share until it expires.
    policy.finish("small-0", now=302.0, output_tokens=56)
    assert policy.dispatch(now=302.0).started == ()
    expired = {f.id: f for f in policy.dispatch(now=600.5).expired}
    assert expired["big-20"].held_by is Hold.KV_SHARE


def test_a_head_that_does_not_fit_at_all_waits_on_the_ledger() -> None:
    # With small's 20 blocks started the pool is full: big's last is held
    # by the ledger, as any head that does not fit.
    policy = one_lane_policy()
    assert _fill(policy, small=True) == ["small-0"]
    expired = {f.id: f for f in policy.dispatch(now=600.5).expired}
    assert expired["big-20"].held_by is Hold.KV


def test_without_shares_the_head_goes_first() -> None:
    # share_window_s null turns protection by share off: the lane's head
    # starts, and small's 20 blocks no longer fit.
    assert _fill(one_lane_policy(share_window_s=None), small=True) == ["big-20"]


def test_a_tenant_alone_fills_the_pool() -> None:
    # Nobody else needs the pool: nothing is owed, and big's last starts.
    assert _fill(one_lane_policy(), small=False) == ["big-20"]


def _big_fills_the_pool(policy: Policy) -> None:
    for k in range(20):
        submit(policy, f"big-{k}", "big", 24, now=0.0)
    assert len(policy.dispatch(now=0.0).started) == 20


def test_room_is_kept_for_a_tenant_whose_requests_gave_up_on_the_pool() -> None:
    # big fills the pool; each of small's 20-block requests waits a second
    # at the lane's front for room and gives up. Counted only while queued,
    # small would need almost nothing; counted as held from when they gave
    # up, small is owed room, so when four of big's requests end big's next
    # is held and the freed blocks wait for small's next request. (Reclaim
    # off: with it, big's latest starts are revoked for small's requests.)
    policy = one_lane_policy(share_window_s=2.0, reclaim=False)
    _big_fills_the_pool(policy)
    for k in range(4):
        at = 0.1 + 1.2 * k
        request = Request(
            id=f"small-{k}", tenant="small", prompt_tokens=264, max_new_tokens=56, deadline=at + 1
        )
        policy.submit(request, now=at)
        assert policy.dispatch(now=at).started == ()
        (expired,) = policy.dispatch(now=at + 1.05).expired
        assert (expired.id, expired.held_by) == (f"small-{k}", Hold.KV)
    for k in range(4):
        policy.finish(f"big-{k}", now=5.0, output_tokens=56)
    submit(policy, "big-20", "big", 24, now=5.0)
    assert policy.dispatch(now=5.0).started == ()
    submit(policy, "small-4", "small", 264, now=5.2)
    assert [started.id for started in policy.dispatch(now=5.2).started] == ["small-4"]


def test_without_requests_that_gave_up_the_tenant_filling_the_pool_refills_it() -> None:
    # The same, but small never asked: nobody is owed, big-20 starts at once.
    policy = one_lane_policy(share_window_s=2.0)
    _big_fills_the_pool(policy)
    for k in range(4):
        policy.finish(f"big-{k}", now=5.0, output_tokens=56)
    submit(policy, "big-20", "big", 24, now=5.0)
    assert [started.id for started in policy.dispatch(now=5.0).started] == ["big-20"]


def test_with_nothing_running_no_room_is_kept() -> None:
    # Three tenants each wait with 60 blocks of 100: each is past its third,
    # so none would leave the others' shares free. The room owed would come
    # from a running request's end, and nothing runs: the first in fair
    # order starts, and the next then waits on the ledger (40 blocks free),
    # the last behind it.
    policy = one_lane_policy()
    for name in ("a", "b", "c"):
        submit(policy, name, name, 904, now=0.0)
    assert [started.id for started in policy.dispatch(now=0.0).started] == ["a"]
    expired = {f.id: f for f in policy.dispatch(now=600.5).expired}
    assert {name: finished.held_by for name, finished in expired.items()} == {
        "b": Hold.KV,
        "c": None,
    }


def _behind_big(report: EngineSignals | None) -> list[str]:
    """big's twenty 5-block requests fill the pool; one ends at 300 s. Then
    big's 6-block request heads the lane (the shorter prompt), past big's
    share and not fitting the 5 blocks free, and small's 3-block one waits
    behind it. The ids started at 300 s, ``report`` observed just before."""
    policy = one_lane_policy()
    _big_fills_the_pool(policy)
    for second in range(1, 300):
        assert policy.dispatch(now=float(second)).started == ()
    policy.finish("big-0", now=300.0, output_tokens=56)
    submit(policy, "big-20", "big", 40, now=300.0)
    small = Request(id="small-0", tenant="small", prompt_tokens=41, max_new_tokens=7)
    assert policy.submit(small, now=300.0).accepted
    if report is not None:
        policy.observe(report, now=report.observed_at)
    return [started.id for started in policy.dispatch(now=300.0).started]


def test_while_the_engine_preempts_a_head_past_its_share_yields_the_lane() -> None:
    # Calm, the head that does not fit holds its lane (as any head: a large
    # request is never starved by smaller ones passing it).
    assert _behind_big(None) == []
    assert _behind_big(EngineSignals(observed_at=299.5, preemption_rate=0.0)) == []
    # The engine evicts running requests: the pool is over-committed in
    # fact, so a tenant past its share takes nothing past it, and the lane's
    # next tenant goes in its place.
    assert _behind_big(EngineSignals(observed_at=299.5, preemption_rate=2.0)) == ["small-0"]
    # A report older than the signals' 10 s is unknown: no evidence.
    assert _behind_big(EngineSignals(observed_at=285.0, preemption_rate=2.0)) == []
