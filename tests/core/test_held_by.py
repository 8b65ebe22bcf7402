"""What a queued request that ended before it started was last held back for."""

from __future__ import annotations

from slopolicy import Demote, Finished, Hold, Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter


def _policy() -> Policy:
    """Two lanes; ``heavy`` may use the 75 shared blocks of 100 (16 tokens
    each), so two of its 600-token prompts with 64-token answers (42 blocks
    each) never fit at once; its queue waits 10 s at most."""
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {
                    "name": "interactive",
                    "max_new_tokens": 64,
                    "max_prompt_tokens": 500,
                    "max_queue_wait_s": 2.0,
                    "kv_reserve": 0.25,
                },
                {
                    "name": "heavy",
                    "max_new_tokens": 64,
                    "max_prompt_tokens": 2000,
                    "over_budget": "reject",
                    "max_queue_wait_s": 10.0,
                },
            ],
            "kv": {"num_blocks": 100, "block_size": 16},
            "engine": {"max_running": 10},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _long(policy: Policy, name: str, now: float) -> None:
    decision = policy.submit(
        Request(id=name, tenant=name, prompt_tokens=600, max_new_tokens=64), now=now
    )
    assert isinstance(decision, Demote)  # over the interactive lane's prompt cap


def test_a_head_whose_kv_never_fits_expires_held_by_kv_and_the_one_behind_it_by_nothing() -> None:
    policy = _policy()
    for name in ("running", "head", "behind"):
        _long(policy, name, now=0.0)
    assert [s.id for s in policy.dispatch(now=0.0)] == ["running"]
    assert policy.dispatch(now=5.0).started == ()
    expired = {f.id: f for f in policy.dispatch(now=10.5).expired}
    assert set(expired) == {"head", "behind"}
    # ``head`` was the next of its lane to start and its KV did not fit the
    # ledger; ``behind`` never reached the front, so nothing held it there.
    assert expired["head"].held_by is Hold.KV
    assert expired["behind"].held_by is None


def test_a_request_held_back_and_then_started_reports_no_hold() -> None:
    policy = _policy()
    _long(policy, "first", now=0.0)
    _long(policy, "second", now=0.0)
    assert [s.id for s in policy.dispatch(now=0.0)] == ["first"]
    assert policy.dispatch(now=1.0).started == ()  # ``second`` held: its KV does not fit
    policy.finish("first", now=2.0, output_tokens=64)
    assert [s.id for s in policy.dispatch(now=2.0)] == ["second"]
    finished = policy.finish("second", now=3.0, output_tokens=64)
    assert isinstance(finished, Finished)
    assert finished.held_by is None  # it started: the hold was not how it ended


def test_hold_wire_names_are_stable() -> None:
    assert {hold.value for hold in Hold} == {
        "kv",
        "kv_share",
        "prefill_budget",
        "seats",
        "lane_paused",
        "decode_pace",
        "predicted_late",
    }
