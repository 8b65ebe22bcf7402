"""Hypothesis strategies for requests and policy configurations.

Use them to property-test your own rules and policies::

    from hypothesis import given
    from slopolicy.testing.strategies import requests

    @given(requests(lanes=["interactive", "heavy"]))
    def test_my_rule_never_crashes(request): ...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    from hypothesis import strategies as st
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "slopolicy.testing needs hypothesis: pip install 'slopolicy[testing]'"
    ) from error

from slopolicy.config import PolicyConfig
from slopolicy.config.ladder import RUNGS
from slopolicy.core.request import REASONING_EFFORTS, Message, Request

__all__ = ("messages", "policy_configs", "requests")

_names = st.from_regex(r"[a-z][a-z0-9_-]{0,11}", fullmatch=True)


def messages(max_size: int = 6) -> st.SearchStrategy[tuple[Message, ...]]:
    """Chat conversations of 1 to ``max_size`` messages."""
    message = st.builds(
        Message,
        role=st.sampled_from(["system", "user", "assistant"]),
        content=st.text(max_size=200),
        name=st.none() | _names,
    )
    return st.lists(message, min_size=1, max_size=max_size).map(tuple)


def requests(
    *,
    tenants: Sequence[str] = ("acme", "globex", "initech"),
    lanes: Sequence[str] = (),
    max_prompt_tokens: int = 200_000,
    max_new_tokens: int = 8192,
) -> st.SearchStrategy[Request]:
    """Valid requests with known prompt sizes, sometimes text or chat, hinting ``lanes``."""
    prompt_kwargs: st.SearchStrategy[dict[str, Any]] = st.one_of(
        st.builds(dict, prompt_tokens=st.integers(0, max_prompt_tokens)),
        st.builds(dict, prompt=st.text(max_size=300)),
        st.builds(dict, messages=messages()),
    )
    n = st.integers(1, 4)

    @st.composite
    def build(draw: st.DrawFn) -> Request:
        sequences = draw(n)
        return Request(
            tenant=draw(st.sampled_from(list(tenants))),
            max_new_tokens=draw(st.integers(1, max_new_tokens)),
            n=sequences,
            best_of=draw(st.none() | st.integers(sequences, 6)),
            logprobs=draw(st.none() | st.integers(0, 20)),
            reasoning_effort=draw(st.none() | st.sampled_from(sorted(REASONING_EFFORTS))),
            tool_risk=draw(st.floats(0, 1)),
            lane=draw(st.none() | st.sampled_from(list(lanes))) if lanes else None,
            **draw(prompt_kwargs),
        )

    return build()


@st.composite
def _config_data(draw: st.DrawFn) -> dict[str, Any]:
    lane_names = draw(st.lists(_names, min_size=1, max_size=4, unique=True))
    reserves = draw(
        st.lists(
            st.sampled_from([0.0, 0.05, 0.1, 0.2]),
            min_size=len(lane_names),
            max_size=len(lane_names),
        )
    )
    lanes = []
    for name, reserve in zip(lane_names, reserves, strict=True):
        p95 = draw(st.none() | st.floats(0.05, 30))
        lanes.append(
            {
                "name": name,
                "slo": {"ttft_p95_s": p95, "ttft_p99_s": None if p95 is None else p95 * 2},
                "max_new_tokens": draw(st.none() | st.integers(1, 8192)),
                "max_prompt_tokens": draw(st.none() | st.integers(1, 200_000)),
                "over_budget": draw(st.sampled_from(["demote", "defer", "reject"])),
                "max_cost": draw(st.none() | st.floats(1, 1e6)),
                "queue_capacity": draw(st.integers(1, 10_000)),
                "max_queue_wait_s": draw(st.floats(0.01, 3600)),
                "weight": draw(st.floats(0.1, 16)),
                "kv_reserve": reserve,
            }
        )
    tier_names = draw(st.lists(_names, min_size=1, max_size=3, unique=True))
    tiers = {}
    for name in tier_names:
        allowed = draw(st.none() | st.lists(st.sampled_from(lane_names), min_size=1, unique=True))
        rate = draw(st.none() | st.floats(1, 1e6))
        tiers[name] = {
            "rate": rate,
            "burst": None if rate is None else rate * draw(st.floats(1, 100)),
            "max_concurrency": draw(st.none() | st.integers(1, 1000)),
            "max_prompt_tokens": draw(st.none() | st.integers(1, 200_000)),
            "weight": draw(st.floats(0.1, 10)),
            "default_lane": lane_names[0] if allowed is None else allowed[0],
            "allowed_lanes": allowed,
            "lanes": {lane: {"share": draw(st.floats(0.01, 1))} for lane in (allowed or [])[:1]},
        }
    tenants = draw(st.dictionaries(_names, st.sampled_from(tier_names), max_size=4))
    return {
        "lanes": lanes,
        "tiers": tiers,
        "default_tier": tier_names[0],
        "tenants": tenants,
        "cost": {
            "alpha": draw(st.floats(0, 4)),
            "beta": draw(st.floats(0, 4)),
            "gamma": draw(st.floats(0, 5000)),
        },
        "kv": {"num_blocks": draw(st.integers(1, 100_000)), "block_size": 16},
        "ladder": {
            "rungs": draw(st.lists(st.sampled_from(RUNGS), unique=True)),
            "dwell_s": draw(st.floats(0.1, 60)),
        },
    }


def policy_configs() -> st.SearchStrategy[PolicyConfig]:
    """Valid, varied policy configurations."""
    return _config_data().map(PolicyConfig.from_dict)
