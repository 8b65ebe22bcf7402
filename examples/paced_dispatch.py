"""Pacing starts to a rate in cost units per second (``engine.dispatch_rate``),
e.g. to stay under an upstream API's tokens-per-minute quota.

Run it: ``python examples/paced_dispatch.py``. Six requests from two tenants
arrive at once; the Gate starts them at 2,000 cost units per second, in fair
order, each as soon as the rate allows (no polling). Each request's actual
cost is settled when it ends, so the pace follows what was really served.
"""

from __future__ import annotations

import itertools

import anyio

from slopolicy import Gate, PolicyConfig, Request

CONFIG = PolicyConfig.from_dict(
    {
        # A request costs alpha * prompt + beta * output tokens = 500 + 2 * 50.
        "engine": {"max_running": 64, "dispatch_rate": 2000.0, "dispatch_burst": 0.0},
        # Paced requests wait longer than a chat TTFT target: let them wait.
        "lanes": [{"name": "interactive", "slo_deadline": False}],
    }
)


async def main() -> None:
    starts: list[tuple[str, float]] = []
    async with Gate(CONFIG) as gate:
        begin = anyio.current_time()

        async def call(request: Request) -> None:
            async with gate.admit(request) as ticket:
                starts.append((request.id, anyio.current_time() - begin))
                ticket.tokens(50)  # the engine's output; the actual cost is settled at the end

        async with anyio.create_task_group() as group:
            for k in range(3):
                for tenant in ("acme", "globex"):
                    request = Request(
                        id=f"{tenant}-{k}", tenant=tenant, prompt_tokens=500, max_new_tokens=50
                    )
                    group.start_soon(call, request)
    for name, at in starts:
        print(f"{at:5.2f} s  {name}")
    # 600 cost units each at 2,000 per second: one start every 0.3 s...
    gaps = [later - earlier for (_, earlier), (_, later) in itertools.pairwise(starts)]
    assert all(abs(gap - 0.3) < 0.05 for gap in gaps), gaps
    # ...in fair order: the two tenants are never more than one request apart.
    tenants = [name.split("-")[0] for name, _ in starts]
    for served in range(1, len(tenants) + 1):
        acme = tenants[:served].count("acme")
        assert abs(acme - (served - acme)) <= 1, tenants


if __name__ == "__main__":
    anyio.run(main)
