"""Under saturation, inside a lane's fair slack, a tenant asking for more
than its max-min share (``engine.share_window_s``) goes after the tenants
within theirs: a deep backlog of short requests no longer passes a light
tenant's longer one by key."""

from __future__ import annotations

from typing import Any

import pytest

from slopolicy import ConfigError, Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter


def _policy(**engine: Any) -> Policy:
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {
                    "name": "chat",
                    "queue_capacity": 1000,
                    "max_queue_wait_s": 1000.0,
                    "fair_slack": 1e6,
                }
            ],
            "tiers": {"default": {}},
            "engine": {"max_running": 1, **engine},
            "ladder": {"enabled": False},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _first_after_a_backlog(policy: Policy) -> str:
    """``deep`` sends 20 short requests a second for 5 s while one seat
    serves 2 a second; then ``light`` sends one longer request. Which starts next?"""
    now, running, k = 0.0, None, 0
    while now < 5.0:
        for _ in range(2):
            for _ in range(5):
                policy.submit(
                    Request(id=f"d{k}", tenant="deep", prompt_tokens=100, max_new_tokens=5),
                    now=now,
                )
                k += 1
            if running is not None:
                policy.finish(running, now=now, output_tokens=5)
            (running,) = [s.id for s in policy.dispatch(now=now)]
            now += 0.25
    assert running is not None
    policy.finish(running, now=now, output_tokens=5)
    light = Request(id="light", tenant="light", prompt_tokens=300, max_new_tokens=5)
    policy.submit(light, now=now)  # deep is within the slack of it: the keys decide
    (started,) = [s.id for s in policy.dispatch(now=now)]
    return started


def test_a_tenant_within_its_share_is_not_passed_by_an_over_share_backlog() -> None:
    assert _first_after_a_backlog(_policy()) == "light"


def test_without_the_share_window_the_shortest_goes_first() -> None:
    assert _first_after_a_backlog(_policy(share_window_s=None)).startswith("d")


@pytest.mark.parametrize("window", [0, -1.0, "soon"])
def test_a_bad_share_window_is_a_config_error(window: object) -> None:
    with pytest.raises(ConfigError, match="share_window_s"):
        PolicyConfig.from_dict({"engine": {"share_window_s": window}})


def test_a_tenant_is_counted_at_its_forecast_answer_not_its_ceiling() -> None:
    """Two tenants ask for the same work under saturation; ``wide`` sends a
    32k ceiling for answers of 50 tokens, as reasoning clients do. Counted
    at its ceiling it would read as asking far more than its share and go
    behind ``tight`` every time; counted at the lane's forecast answer, the
    two share the seat (the answers before the lane has a forecast, counted
    at the ceiling, have decayed out of a 2 s window by the time starts are
    counted)."""
    policy = _policy(share_window_s=2.0)
    now, running, k = 0.0, None, 0
    starts = {"wide": 0, "tight": 0}
    while now < 30.0:
        for tenant, ceiling in (("wide", 32_768), ("tight", 64)):
            policy.submit(
                Request(id=f"r{k}", tenant=tenant, prompt_tokens=100, max_new_tokens=ceiling),
                now=now,
            )
            k += 1
        if running is not None:
            policy.finish(running, now=now, output_tokens=50)
        started = policy.dispatch(now=now).started
        if started:
            (start,) = started
            running = start.id
            if now > 10.0:  # past the lane's first answers: the forecast holds
                starts[start.tenant] += 1
        now += 0.5
    assert starts["wide"] >= 0.4 * (starts["wide"] + starts["tight"]), starts
