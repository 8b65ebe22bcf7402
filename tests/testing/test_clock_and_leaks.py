from __future__ import annotations

import pytest

from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.errors import UsageError
from slopolicy.testing import ManualClock, assert_no_leaks, leaks


def test_the_manual_clock_only_moves_forward() -> None:
    clock = ManualClock(10)
    assert clock() == clock.now() == 10.0
    assert clock.advance(0.5) == 10.5
    assert clock.set(12) == 12.0
    assert repr(clock) == "ManualClock(12.0)"
    with pytest.raises(UsageError, match="forward"):
        clock.advance(-1)
    with pytest.raises(UsageError, match="forward"):
        clock.set(11)
    with pytest.raises(UsageError, match="finite"):
        clock.advance(float("nan"))


def test_leaks_lists_what_a_policy_still_holds() -> None:
    policy = Policy(PolicyConfig(), counter=HeuristicCounter())
    clock = ManualClock()
    policy.submit(Request(id="a", tenant="t", prompt_tokens=100), now=clock.now())
    policy.submit(Request(id="b", tenant="t", prompt_tokens=100, lane="heavy"), now=clock.now())
    policy.dispatch(now=clock.now())  # "a": one prompt at a time on a cold start
    policy.first_token("a", now=clock.now())
    policy.dispatch(now=clock.now())  # "b"
    found = leaks(policy)
    assert any("running" in line for line in found)
    assert any("KV blocks" in line for line in found)
    assert any("quota leases" in line for line in found)
    with pytest.raises(AssertionError, match="leaked"):
        assert_no_leaks(policy)
    clock.advance(1)
    policy.finish("a", now=clock.now(), output_tokens=10)
    policy.finish("b", now=clock.now(), output_tokens=10)
    assert leaks(policy) == []
    assert_no_leaks(policy)
