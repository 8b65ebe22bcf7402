"""A one-lane policy on a pool of 100 KV blocks, for the tests of how the
pool is shared between tenants (shares, holds and reclaim)."""

from __future__ import annotations

from typing import Any

from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter


def one_lane_policy(ttft: float | None = None, *, ladder: bool = True, **engine: Any) -> Policy:
    """One lane, shortest prompt first, with a TTFT target of ``ttft``
    seconds (none: no target); 100 blocks of 16 tokens: a request of
    ``prompt`` tokens and a 56-token answer reserves ``(prompt + 56) / 16``
    of them (5 at 24 tokens, 20 at 264). ``ladder``: the fallback ladder on
    (it ticks each second). ``engine``: settings over 50 seats."""
    slo = {} if ttft is None else {"slo": {"ttft_p95_s": ttft}}
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {
                    "name": "chat",
                    "max_new_tokens": 56,
                    "max_prompt_tokens": 1000,
                    "max_queue_wait_s": 600.0,
                    **slo,
                }
            ],
            "kv": {"num_blocks": 100, "block_size": 16},
            "engine": {"max_running": 50, **engine},
            "ladder": {"enabled": ladder},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def submit(policy: Policy, name: str, tenant: str, prompt: int, now: float) -> None:
    """Submit ``tenant``'s request ``name`` of ``prompt`` tokens and a 56-token answer."""
    policy.submit(Request(id=name, tenant=tenant, prompt_tokens=prompt, max_new_tokens=56), now=now)
