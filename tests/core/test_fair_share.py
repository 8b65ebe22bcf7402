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
