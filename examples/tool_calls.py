"""Tool calls between an agent's turns through the Gate: caps, fair waiting, timeouts.

Run it: ``python examples/tool_calls.py``. The tools are stand-ins (a short
sleep); put your own search, retriever or code runner in their place.
"""

from __future__ import annotations

import anyio

from slopolicy import Gate, PolicyConfig, Rejected, ToolTimeout

CONFIG = PolicyConfig.from_dict(
    {
        "tools": {
            "limits": {
                # An external search API: 4 calls at once, 2 per tenant, 50/s.
                "search": {
                    "max_concurrency": 4, "tenant_max_concurrency": 2,
                    "rate": 50.0, "burst": 20.0, "timeout_s": 0.2, "max_wait_s": 1.0,
                },
                "*": {"max_concurrency": 8, "timeout_s": 1.0},  # every other tool
            },
            "ladder_signal": "timeouts",  # tool timeouts are an early overload signal
        }
    }
)  # fmt: skip


async def search(query: str, seconds: float) -> str:
    await anyio.sleep(seconds)  # stands in for the real call
    return f"results for {query!r}"


async def agent(gate: Gate, tenant: str, queries: list[tuple[str, float]]) -> None:
    tool_time = 0.0
    for query, seconds in queries:
        call = gate.tool(tenant=tenant, name="search")
        try:
            async with call:
                await search(query, seconds)
        except ToolTimeout as error:  # cancelled at its timeout; the slot is back
            print(f"{tenant}: {query!r} timed out after {error.timeout:g} s")
        except Rejected as error:  # rate_limited, queue_full, expired, unknown_tool...
            print(f"{tenant}: {query!r} refused: {error.code} ({error.http_status})")
        tool_time += call.time_s  # waited plus ran: what the task's budget pays
    print(f"{tenant}: {len(queries)} calls, {tool_time:.2f} s of tool time")


async def main() -> None:
    async with Gate(CONFIG) as gate, anyio.create_task_group() as group:
        group.start_soon(agent, gate, "acme", [("flights", 0.02), ("hotels", 0.5)])
        group.start_soon(agent, gate, "globex", [("weather", 0.02)] * 3)
    stats = gate.policy.tools.statistics(now=gate.clock())
    for tool in stats.tools:
        print(f"{tool.name}: {tool.started} started, timeout rate {tool.timeout_rate:.0%}")


if __name__ == "__main__":
    anyio.run(main)
