"""A lane's ``queue_order`` and ``fair_slack`` reach its fair queue: with
``shortest`` (the default), fewest prompt tokens first inside a tenant, and
across the tenants within the slack (by default the cost of the lane's
largest prompt); ``arrival`` keeps arrival order."""

from __future__ import annotations

from typing import Any

import pytest

from slopolicy import ConfigError, Policy, PolicyConfig, Request
from slopolicy.config.lanes import LaneConfig
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.specs import LaneSpec
from slopolicy.errors import UsageError


def _policy(**lane: Any) -> Policy:
    """One lane; one engine seat, held by a request until the first dispatch
    after :func:`_drain` releases it, so everything submitted before waits."""
    config = PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "queue_capacity": 100, "max_queue_wait_s": 100.0, **lane}],
            "tiers": {"default": {}},
            "engine": {"max_running": 1},
            "ladder": {"enabled": False},
        }
    )
    policy = Policy(config, counter=HeuristicCounter())
    policy.submit(Request(id="holder", tenant="x", prompt_tokens=10, max_new_tokens=5), now=0.0)
    assert [s.id for s in policy.dispatch(now=0.0)] == ["holder"]
    return policy


def _submit(policy: Policy, request_id: str, tenant: str, prompt_tokens: int) -> None:
    request = Request(id=request_id, tenant=tenant, prompt_tokens=prompt_tokens, max_new_tokens=5)
    policy.submit(request, now=1.0)


def _drain(policy: Policy) -> list[str]:
    """Start what waits one at a time, each ending before the next starts."""
    order: list[str] = []
    now, running = 2.0, "holder"
    while True:
        policy.finish(running, now=now, output_tokens=5)
        started = [s.id for s in policy.dispatch(now=now)]
        if not started:
            return order
        (running,) = started
        order.append(running)
        now += 1.0


_PROMPTS = {"a0": 400, "a1": 100, "a2": 300, "a3": 100, "a4": 200}


@pytest.mark.parametrize(
    ("lane", "expected"),
    [
        ({"queue_order": "arrival"}, ["a0", "a1", "a2", "a3", "a4"]),
        ({"queue_order": "arrival", "fair_slack": 1e6}, ["a0", "a1", "a2", "a3", "a4"]),
        ({}, ["a1", "a3", "a4", "a2", "a0"]),
        ({"queue_order": "shortest"}, ["a1", "a3", "a4", "a2", "a0"]),
    ],
)
def test_a_tenants_requests_start_in_the_lanes_order(
    lane: dict[str, Any], expected: list[str]
) -> None:
    policy = _policy(**lane)
    for request_id, prompt in _PROMPTS.items():
        _submit(policy, request_id, "a", prompt)
    assert _drain(policy) == expected


def test_the_slack_lets_shortest_first_cross_tenants() -> None:
    def order(**lane: Any) -> list[str]:
        policy = _policy(queue_order="shortest", **lane)
        for k in range(3):
            _submit(policy, f"big{k}", "big", 2000)
        for k in range(20):
            _submit(policy, f"small{k}", "small", 100)
        return _drain(policy)

    smalls = [f"small{k}" for k in range(20)]
    # Slack 0: level counters, so small's shorter request goes first; then
    # big's turn, as small is ahead, and big's next once small has caught up.
    level = order()
    assert level[:2] == ["small0", "big0"]
    assert level.index("big1") < level.index("small19")
    assert [r for r in level if r.startswith("small")] == smalls
    # A slack larger than every cost: shortest first across the tenants.
    assert order(fair_slack=1e9) == [*smalls, "big0", "big1", "big2"]


def test_the_defaults_go_shortest_first_within_the_largest_prompt_s_cost() -> None:
    spec = LaneConfig(name="chat").to_spec()
    assert (spec.queue_order, spec.fair_slack) == ("shortest", 0.0)  # no prompt budget: 0
    assert spec.queue_key(500) == 500.0
    budgeted = LaneConfig(name="chat", max_prompt_tokens=8192).to_spec(prompt_cost=2.0)
    assert budgeted.fair_slack == 16_384.0  # 8,192 prompt tokens at 2 cost units each
    for lane in PolicyConfig().lanes:
        assert (lane.queue_order, lane.fair_slack) == ("shortest", None)
    arrival = LaneConfig(name="chat", queue_order="arrival").to_spec()
    assert arrival.queue_key(500) == 0.0
    config = LaneConfig(name="chat", queue_order="shortest", fair_slack=250.0).to_spec()
    assert (config.queue_order, config.fair_slack, config.queue_key(500)) == (
        "shortest",
        250.0,
        500.0,
    )
    policy = _policy(queue_order="shortest", fair_slack=250.0)
    assert policy._queues._lane("chat").queue.slack == 250.0


@pytest.mark.parametrize(
    "lane",
    [{"queue_order": "fifo"}, {"fair_slack": 0}, {"fair_slack": -1.0}, {"fair_slack": "x"}],
)
def test_bad_lane_settings_are_config_errors(lane: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        _policy(**lane)


def test_a_bad_lane_spec_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="queue_order"):
        LaneSpec("chat", queue_order="fifo")  # type: ignore[arg-type]
