from __future__ import annotations

from typing import Any

import pytest
from trio.testing import MockClock

from slopolicy import Gate, Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.lifecycle import Dispatch
from slopolicy.testing.virtual_loop import virtual_event_loop


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Both backends on virtual time: nothing here sleeps on the wall clock."""
    if request.param == "asyncio":
        return "asyncio", {"loop_factory": virtual_event_loop}
    return "trio", {"clock": MockClock(autojump_threshold=0)}


def config(**overrides: Any) -> PolicyConfig:
    """Two lanes, a small engine (2 running), no ladder unless asked."""
    data: dict[str, Any] = {
        "lanes": [
            {
                "name": "interactive",
                "max_new_tokens": 64,
                "max_prompt_tokens": 500,
                "queue_capacity": 8,
                "max_queue_wait_s": 5.0,
                "weight": 4,
            },
            {
                "name": "heavy",
                "max_new_tokens": 256,
                "max_prompt_tokens": 4000,
                "over_budget": "reject",
                "queue_capacity": 8,
                "max_queue_wait_s": 30.0,
                "weight": 1,
            },
        ],
        "tiers": {
            "default": {"rate": 100_000.0, "burst": 100_000.0, "max_concurrency": 16},
            "tiny": {"rate": 10.0, "burst": 300.0, "max_concurrency": 1},
        },
        "tenants": {"small": "tiny"},
        "kv": {"num_blocks": 400, "block_size": 16},
        "engine": {"max_running": 2},
        "ladder": {"enabled": False},
    }
    data.update(overrides)
    return PolicyConfig.from_dict(data)


def policy(**overrides: Any) -> Policy:
    return Policy(config(**overrides), counter=HeuristicCounter())


def assert_clean(target: Policy) -> None:
    """Every slot, block, quota lease and queue place is back."""
    stats = target.statistics()
    assert stats.running == 0
    assert stats.kv.used_blocks == 0
    assert stats.kv.reservations == 0
    assert stats.quotas.in_flight == 0
    assert all(count == 0 for count in stats.queued.values()), stats.queued
    ended = sum(stats.outcomes.values())
    assert ended == stats.submitted, (ended, stats.submitted)


def make_request(name: str, tenant: str = "t", **fields: object) -> Request:
    values: dict[str, object] = {"prompt_tokens": 50, "max_new_tokens": 16}
    values.update(fields)
    return Request(id=name, tenant=tenant, **values)  # type: ignore[arg-type]


class Dispatches:
    """Counts and records the policy's dispatch calls."""

    def __init__(self, gate: Gate) -> None:
        self.calls: list[Dispatch] = []
        original = gate.policy.dispatch

        def dispatch(*, now: float, max_expired: int | None = None) -> Dispatch:
            result = original(now=now, max_expired=max_expired)
            self.calls.append(result)
            return result

        gate.policy.dispatch = dispatch  # type: ignore[method-assign]
