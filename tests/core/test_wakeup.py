"""``Policy.next_wakeup`` is never late: until it, a dispatch changes nothing.

The lifecycle machines of ``test_policy_properties`` (the prefill budget and the
ladder on; the paced one with ``engine.dispatch_rate``) with one more rule: a
driver's dispatch, then a dispatch at some time before the wake-up it was
given (the clock moved on that far) must start, expire and evaluate nothing.
"""

from __future__ import annotations

import math

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.health.signals import EngineSignals
from tests.core.test_policy_properties import PacedPolicyLifecycle, PolicyLifecycle


class _NeverLate(PolicyLifecycle):
    @rule(fraction=st.floats(0.0, 1.0, exclude_max=True), far=st.floats(0.0, 1e4))
    def wakeup_is_not_late(self, fraction: float, far: float) -> None:
        self.dispatch()  # as a driver does after its other calls
        wake = self.policy.next_wakeup(now=self.now)
        if wake is None:
            probe = self.now + far
            event("no wake-up")
        else:
            assert wake >= self.now
            if wake == self.now:
                return  # due at once: nothing is claimed before it
            probe = min(self.now + fraction * (wake - self.now), math.nextafter(wake, -math.inf))
        assert not self.policy.health.due(now=probe), (
            f"an evaluation is due at {probe} before {wake}"
        )
        self.now = probe
        result = self.policy.dispatch(now=probe)
        assert not result.started, f"started at {probe} before the wake-up {wake}"
        assert not result.expired, f"expired at {probe} before the wake-up {wake}"
        assert result.ladder is None

    @rule(kv=st.floats(0.0, 1.0), waiting=st.integers(0, 50))
    def observe(self, kv: float, waiting: int) -> None:
        signals = EngineSignals(observed_at=self.now, kv_usage=kv, waiting=waiting)
        self.policy.observe(signals, now=self.now)


class WakeupLifecycle(_NeverLate):
    """The prefill budget and the fallback ladder: deadlines, held starts, evaluations."""


class PacedWakeupLifecycle(_NeverLate, PacedPolicyLifecycle):
    """The dispatch rate on as well: paced starts."""


WakeupLifecycle.TestCase.settings = settings(max_examples=100, stateful_step_count=50)
TestWakeupLifecycle = WakeupLifecycle.TestCase
PacedWakeupLifecycle.TestCase.settings = settings(max_examples=100, stateful_step_count=50)
TestPacedWakeupLifecycle = PacedWakeupLifecycle.TestCase


def test_the_wakeup_is_the_earliest_timer() -> None:
    config = PolicyConfig.from_dict(
        {
            "lanes": [{"name": "interactive", "max_queue_wait_s": 2.0}],
            "engine": {"max_running": 1},
            "ladder": {"evaluate_every_s": 5.0},
        }
    )
    policy = Policy(config, counter=HeuristicCounter())
    assert policy.next_wakeup(now=10.0) == 10.0  # the first evaluation is due at once
    policy.dispatch(now=10.0)
    assert policy.next_wakeup(now=10.0) == 15.0  # the next evaluation
    for name in ("a", "b"):
        policy.submit(Request(id=name, prompt_tokens=10, max_new_tokens=10), now=11.0)
    policy.dispatch(now=11.0)  # "a" starts, "b" waits until 13.0
    assert policy.next_wakeup(now=11.0) == 13.0
    assert policy.next_wakeup(now=14.0) == 14.0  # overdue: at once, never in the past
    assert policy.dispatch(now=14.0).expired[0].id == "b"
    off = config.model_copy(update={"ladder": config.ladder.model_copy(update={"enabled": False})})
    no_ladder = Policy(off, counter=HeuristicCounter())
    assert no_ladder.next_wakeup(now=0.0) is None
