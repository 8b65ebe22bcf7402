"""``slopolicy validate``'s description: task SLOs and tool limits in plain sentences."""

from __future__ import annotations

from slopolicy import PolicyConfig
from slopolicy.config.describe import describe


def test_the_description_names_each_lanes_task_slo() -> None:
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": "interactive"},
                {
                    "name": "agent",
                    "task": {
                        "deadline_s": 90, "idle_timeout_s": 120,
                        "max_tasks": 24, "hold_new_tasks": True,
                    },
                },
                {"name": "batch", "task": {}},
            ]
        }
    )  # fmt: skip
    lines = describe(config).splitlines()
    tasks = [line.strip() for line in lines if "agent tasks:" in line]
    assert tasks == [
        "agent tasks: every turn must succeed, the last within 90 s of the first; "
        "abandoned after 120 s without a turn; at most 24 under way (new ones deferred); "
        "new tasks held while turns of running ones wait",
        "agent tasks: every turn must succeed; abandoned after 300 s without a turn",
    ]
    assert "agent tasks" not in describe(PolicyConfig())


def test_the_description_names_the_tool_limits() -> None:
    config = PolicyConfig.from_dict(
        {
            "tools": {
                "limits": {
                    "search": {
                        "max_concurrency": 4, "tenant_max_concurrency": 2, "rate": 50,
                        "burst": 20, "tenant_rate": 10, "tenant_burst": 5, "timeout_s": 10,
                        "max_wait_s": 0.5,
                    },
                },
                "tenant_max_concurrency": 8,
                "ladder_signal": "timeouts",
                "risk_horizon_s": 4,
            }
        }
    )  # fmt: skip
    text = describe(config)
    section = text[text.index("Tool calls (gate.tool):") :].splitlines()
    assert section[1:] == [
        "  search: 4 at once, 2 at once per tenant, 50 calls/s (burst 20), 10 calls/s per tenant "
        "(burst 5), timeout 10 s, waits at most 500 ms; 1,024 may wait",
        "  tools not listed are refused (unknown_tool, 400)",
        "  a tenant's calls at once, all tools: 8",
        "  rates over 60 s (divided by at least 10 calls); the tool timeout rate feeds the "
        "ladder; tool_risk 1 at 4 s run per call (for a tool without timeout_s)",
    ]
    default = describe(PolicyConfig())
    assert "  every tool: no limits\n" in default
    assert "the ladder reads no tool rate" in default


def test_the_description_names_a_shortest_first_lane_and_its_slack() -> None:
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": "chat", "queue_order": "shortest", "fair_slack": 2500},
                {"name": "batch", "max_prompt_tokens": 4000},
                {"name": "bulk", "queue_order": "arrival", "fair_slack": 10},
                {"name": "rest"},
            ]
        }
    )
    orders = [line.strip() for line in describe(config).splitlines() if "waiting requests" in line]
    assert orders == [
        "waiting requests go shortest prompt first, across the tenants within 2,500 cost "
        "units per unit weight of the least served",
        # Unset, the slack is the cost of the lane's largest prompt.
        "waiting requests go shortest prompt first, across the tenants within 4,000 cost "
        "units per unit weight of the least served",
        "waiting requests go in arrival order",
        "waiting requests go shortest prompt first, across the tenants level with the least served",
    ]
