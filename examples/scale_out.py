"""Three gateway replicas share one tenant's quota through Redis.

Run it: ``python examples/scale_out.py [redis://127.0.0.1:6379/0]`` (default:
``$SLOPOLICY_REDIS_URL``, else that address; ``pip install 'slopolicy[redis]'``).
Each replica is its own process, as behind a load balancer, with its own
``Gate`` and a ``RedisQuotaStore`` on the same Redis. Tenant ``acme`` may burst
1,000 cost units; each request costs 200 (100 prompt tokens + 2 x 50 output
tokens), so the three replicas admit 5 of its 12 requests *together*, however
the requests fall between them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import secrets
import sys

import redis

from slopolicy import Gate, PolicyConfig, Rejected, Request
from slopolicy.backends import FailOpen
from slopolicy.backends.redis import RedisQuotaStore

CONFIG = PolicyConfig.from_dict(
    {
        # One request in flight per replica at most: the shared cap of 3 never
        # binds, so the burst alone decides (with 2, two replicas' requests
        # overlapping in time would be refused by it, as timing falls).
        "tiers": {"metered": {"rate": 1.0, "burst": 1000.0, "max_concurrency": 3}},
        "default_tier": "metered",
        "tenants": {"acme": "metered"},
    }
)
REPLICAS = 3


async def replica(url: str, prefix: str) -> tuple[int, int]:
    """One gateway replica serving 4 of acme's requests: (admitted, refused)."""
    # Every replica uses the same prefix (a real deployment keeps one for good).
    # If Redis goes away, admit on local limits: a third of each tier per replica.
    store = RedisQuotaStore.from_url(url, prefix=prefix, on_failure=FailOpen(share=1 / REPLICAS))
    admitted = refused = 0
    async with store, Gate(CONFIG, quota_store=store) as gate:  # the Gate renews leases
        for _ in range(4):
            request = Request(tenant="acme", prompt_tokens=100, max_new_tokens=50)
            try:
                async with gate.admit(request) as ticket:
                    ticket.finish(output_tokens=50)  # stream from your engine here
                admitted += 1
            except Rejected:  # rate_limited: 429 with Retry-After, as from one gateway
                refused += 1
    return admitted, refused


def serve(url: str, prefix: str) -> tuple[int, int]:
    """A replica process's entry point."""
    return asyncio.run(replica(url, prefix))


def main() -> None:
    """Run the replicas as processes and print what each admitted."""
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SLOPOLICY_REDIS_URL")
    url = url or "redis://127.0.0.1:6379/0"
    try:
        with redis.Redis.from_url(url) as client:
            client.ping()
    except redis.ConnectionError as error:
        sys.exit(f"no Redis at {url} ({error}): start redis-server, or pass its URL")
    prefix = f"scale-out-example-{secrets.token_hex(4)}"  # a fresh tenant state per run
    with multiprocessing.get_context("spawn").Pool(REPLICAS) as pool:
        results = pool.starmap(serve, [(url, prefix)] * REPLICAS)
    for number, (admitted, refused) in enumerate(results, 1):
        print(f"replica {number}: {admitted} admitted, {refused} refused")
    total = sum(admitted for admitted, _ in results)
    print(f"acme across {REPLICAS} replicas: {total} admitted (burst 1000 / cost 200 = 5)")


if __name__ == "__main__":
    main()
