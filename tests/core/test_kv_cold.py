"""The cold start: until a lane has a forecast of its answers, each counts at
its ceiling, and a head with a first-token deadline that this bound holds
back starts within the pool as held now (``Reservations.cold_fill``); a lane
without a deadline waits, and once the lane has a forecast the peak binds."""

from __future__ import annotations

from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.outcome import Hold
from slopolicy.core.policy.reservations import COLD_FILL


def _policy(output_quantile: str | None = "mean") -> Policy:
    # 100 blocks of 16 tokens.
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": "chat", "slo": {"ttft_p95_s": 5.0}, "max_queue_wait_s": 600.0},
                {"name": "bulk", "max_queue_wait_s": 600.0},
            ],
            "kv": {"num_blocks": 100, "block_size": 16, "output_quantile": output_quantile},
            "engine": {"max_running": 64},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _request(name: str, lane: str, prompt: int, max_new: int) -> Request:
    return Request(id=name, tenant="t", prompt_tokens=prompt, max_new_tokens=max_new, lane=lane)


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
    # is within COLD_FILL of it.
    assert COLD_FILL >= (30 + 40) / 100
    policy.submit(_request("bulk-2", "bulk", 16, 624), now=1.0)
    assert policy.dispatch(now=1.0).started == ()
    assert policy._entries["bulk-2"].held_by is Hold.KV
    policy.submit(_request("chat", "chat", 16, 624), now=1.0)
    assert [s.id for s in policy.dispatch(now=1.0).started] == ["chat"]
    kv = policy.statistics().kv
    assert kv.used_blocks == 31
    assert kv.peak_blocks > kv.num_blocks  # the engine may preempt, as under FCFS


def test_once_the_lane_has_a_forecast_the_peak_binds() -> None:
    policy = _policy()
    for i in range(16):  # the chat lane's answers: 600 tokens each
        policy.submit(_request(f"warm{i}", "chat", 16, 624), now=float(i))
        (started,) = policy.dispatch(now=float(i)).started
        policy.tokens(started.id, 600, now=float(i))
        policy.finish(started.id, now=float(i))
    _long_one_running(policy, 20.0)
    # Forecast 600: 39 blocks for 600 steps, when the long one holds 68.
    policy.submit(_request("chat", "chat", 16, 624), now=21.0)
    assert policy.dispatch(now=21.0).started == ()
    assert policy._entries["chat"].held_by is Hold.KV


def test_ceilings_asked_for_are_not_a_cold_start() -> None:
    policy = _policy(output_quantile=None)  # every answer at its ceiling, by choice
    _long_one_running(policy, 0.0)
    policy.submit(_request("chat", "chat", 16, 624), now=1.0)
    assert policy.dispatch(now=1.0).started == ()
    assert policy._entries["chat"].held_by is Hold.KV
