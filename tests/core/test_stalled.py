"""A started request with no first token by its lane's p99 TTFT target is
revoked while the engine preempts (:attr:`Revocation.STALLED`): an engine
short of KV may be computing its prompt again and again. Not while the
engine reports no preemptions, not once a first token came, not in a lane
without a p99 target or ``slo_deadline``."""

from __future__ import annotations

from typing import Any

import pytest

from slopolicy import EngineSignals, Outcome, Policy, PolicyConfig, Request, Revocation, Revoked
from slopolicy.core.cost.tokens import HeuristicCounter

#: The lane's TTFT targets (seconds): p95 and p99.
P95, P99 = 0.5, 1.0
PREEMPTING = 2.0  # preemptions a second in a report


def _policy(**slo: Any) -> Policy:
    """One lane with ``slo`` (default: p95 0.5 s, p99 1 s), no ladder, a
    queue wait long enough never to matter."""
    targets = slo or {"ttft_p95_s": P95, "ttft_p99_s": P99}
    deadline = targets.pop("slo_deadline", True)
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {
                    "name": "chat",
                    "slo": targets,
                    "max_queue_wait_s": 600.0,
                    "slo_deadline": deadline,
                }
            ],
            "kv": {"num_blocks": 1000, "block_size": 16},
            # Stalled starts report no first token: no prefill budget holding the next.
            "engine": {"prefill_horizon_s": 0},
            "ladder": {"enabled": False},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _start(policy: Policy, name: str, now: float) -> None:
    request = Request(id=name, tenant="t", prompt_tokens=100, max_new_tokens=50)
    assert policy.submit(request, now=now).accepted
    assert [s.id for s in policy.dispatch(now=now).started] == [name]


def _preempting(policy: Policy, at: float, rate: float = PREEMPTING) -> None:
    policy.observe(EngineSignals(observed_at=at, preemption_rate=rate), now=at)


def test_a_stalled_start_is_revoked_at_its_p99_target_while_the_engine_preempts() -> None:
    policy = _policy()
    _start(policy, "a", 0.0)
    _start(policy, "b", 0.25)
    _preempting(policy, 0.5)
    # The timer names a's first-token bound, and nothing is due before it.
    assert policy.next_wakeup(now=0.5) == pytest.approx(P99)
    assert policy.dispatch(now=P99 - 1e-9).revoked == ()
    revoked = policy.dispatch(now=P99).revoked
    assert [f.id for f in revoked] == ["a"]
    (finished,) = revoked
    assert finished.outcome is Outcome.REVOKED
    assert finished.revoked_for is Revocation.STALLED
    assert finished.ttft is None
    # b's bound is next; a's seat and blocks are back.
    assert policy.next_wakeup(now=P99) == pytest.approx(0.25 + P99)
    statistics = policy.statistics()
    assert statistics.running == 1
    assert statistics.outcomes[Outcome.REVOKED] == 1
    # The gate's error says why.
    error = Revoked(finished, None)
    assert error.http_status == 503
    assert "no first token" in error.message
    assert "preempting" in error.message


def test_without_preemptions_a_late_first_token_is_waited_for() -> None:
    policy = _policy()
    _start(policy, "a", 0.0)
    assert policy.next_wakeup(now=0.0) is None  # no timer for it while calm
    assert policy.dispatch(now=5.0).revoked == ()
    _preempting(policy, 5.0, rate=0.0)  # a report of no preemptions
    assert policy.dispatch(now=5.0).revoked == ()
    # Once the engine preempts, the overdue start goes at the next dispatch.
    _preempting(policy, 6.0)
    assert policy.next_wakeup(now=6.0) == 6.0
    assert [f.id for f in policy.dispatch(now=6.0).revoked] == ["a"]
    assert policy.next_wakeup(now=6.0) is None


def test_a_stale_preemption_report_is_no_evidence() -> None:
    policy = _policy()
    _start(policy, "a", 0.0)
    _preempting(policy, 0.5)
    # The signals' 10 s age: at 11 s the report is stale, the engine unknown.
    assert policy.dispatch(now=11.0).revoked == ()
    assert policy.next_wakeup(now=11.0) is None


def test_a_start_that_had_its_first_token_is_never_revoked() -> None:
    policy = _policy()
    _start(policy, "a", 0.0)
    policy.first_token("a", now=0.9)
    _preempting(policy, 0.9)
    assert policy.dispatch(now=5.0).revoked == ()
    policy.finish("a", now=6.0, output_tokens=50)
    assert policy.statistics().outcomes[Outcome.COMPLETED] == 1
    # Its entry left the timer when it came first.
    assert policy.next_wakeup(now=6.0) is None


@pytest.mark.parametrize(
    "slo",
    [
        {"ttft_p95_s": P95},  # no p99 target: no bound for a stall
        {"ttft_p95_s": P95, "ttft_p99_s": P99, "slo_deadline": False},
        {"e2e_p95_s": 60.0},
    ],
    ids=["p95-only", "no-slo-deadline", "e2e-only"],
)
def test_a_lane_without_a_first_token_bound_revokes_nothing(slo: dict[str, Any]) -> None:
    policy = _policy(**slo)
    _start(policy, "a", 0.0)
    _preempting(policy, 0.5)
    assert policy.next_wakeup(now=0.5) is None
    assert policy.dispatch(now=5.0).revoked == ()
    assert policy.statistics().running == 1


def test_a_finished_request_leaves_no_timer_behind() -> None:
    policy = _policy()
    for k in range(50):
        _start(policy, f"r{k}", k * 0.01)
        policy.first_token(f"r{k}", now=k * 0.01 + 0.05)
        policy.finish(f"r{k}", now=k * 0.01 + 0.1, output_tokens=50)
    _preempting(policy, 0.6)
    # The bounds still ahead are timers (spurious ones: those requests
    # ended), each dispatch forgets the entries whose bound has passed.
    assert policy.next_wakeup(now=0.6) == pytest.approx(P99)
    assert policy.dispatch(now=2.0).revoked == ()
    assert policy.next_wakeup(now=2.0) is None
