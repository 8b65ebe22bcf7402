"""One check of ``now`` and of counts for every core entry point (core/checks.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core import (
    CostWeights,
    DispatchPace,
    EngineSignals,
    FairQueue,
    FallbackLadder,
    KVReservation,
    LatencyBudget,
    Pressure,
    QuantileSketch,
    SignalBoard,
    SlidingQuantiles,
    SLOTracker,
    TenantQuotas,
    TierSpec,
    TokenBucket,
    TrackerSet,
    default_triggers,
)
from slopolicy.core.checks import (
    MAX_COUNT,
    MAX_NOW,
    check_count,
    check_now,
    count_problem,
    shown,
    time_problem,
)
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.decisions import Admit, Reason
from slopolicy.core.ladder.rungs import Rung
from slopolicy.core.quota.lease import Lease
from slopolicy.core.slo.burn import BurnWindows
from slopolicy.core.slo.targets import Objective
from slopolicy.errors import UsageError
from tests.core.records import finished

#: Not a time in monotonic seconds: NaN and infinities, nanoseconds and
#: milliseconds since the epoch, ints too large for a float, and non-numbers.
BAD_NOWS: tuple[object, ...] = (
    math.nan,
    math.inf,
    -math.inf,
    1.7e18,
    1.7e12,
    10**400,
    -(10**400),
    10**5000,
    True,
    "1",
    None,
)

Call = Callable[[Any], object]


def _policy() -> Policy:
    return Policy(PolicyConfig(), counter=HeuristicCounter())


def _running_policy() -> Policy:
    policy = _policy()
    policy.submit(Request(id="a", prompt_tokens=10, max_new_tokens=8), now=1.0)
    policy.dispatch(now=1.0)
    return policy


def _prepared(act: Callable[[Policy, Admit, Any], object]) -> Call:
    """``act(policy, decision, now)`` on a decision ``prepare`` accepted."""
    policy = _policy()
    decision = policy.prepare(Request(prompt_tokens=10), now=1.0)
    assert isinstance(decision, Admit)
    return lambda now: act(policy, decision, now)


def _bucket() -> TokenBucket:
    bucket = TokenBucket(1.0, 10.0, now=1.0)
    bucket.try_acquire(3.0, now=1.0)
    return bucket


_TIER = TierSpec("pro", "chat", rate=10.0, burst=100.0)
_SIGNALS = EngineSignals(observed_at=1.0, kv_usage=0.1)


def _leased(act: Callable[[TenantQuotas, Lease, Any], object]) -> Call:
    """``act(quotas, lease, now)`` on a lease granted at 1.0."""
    quotas = TenantQuotas()
    lease = quotas.acquire("acme", _TIER, "chat", 1.0, now=1.0)
    assert isinstance(lease, Lease)
    return lambda now: act(quotas, lease, now)


def _kv() -> KVReservation:
    kv = KVReservation(100, 16)
    kv.try_reserve("r", "chat", 20, now=1.0)
    return kv


def _ladder() -> FallbackLadder:
    ladder = FallbackLadder([Rung("r1", marker=True)], default_triggers(), dwell=1.0, cooldown=1.0)
    ladder.update(Pressure(), now=1.0)
    return ladder


def _tracker() -> SLOTracker:
    tracker = SLOTracker("interactive")
    tracker.record(finished(1.0), now=1.0)
    return tracker


def _trackers() -> TrackerSet:
    trackers = TrackerSet({"interactive": SLOTracker("interactive").targets})
    trackers.record(finished(1.0), now=1.0)
    return trackers


def _burn() -> BurnWindows:
    burn = BurnWindows([(Objective.SUCCESS, 0.99)])
    burn.record(now=1.0, verdicts=[False])
    return burn


def _quantiles() -> SlidingQuantiles:
    window = SlidingQuantiles()
    window.record(1.0, now=1.0)
    return window


def _calls() -> dict[str, Callable[[], Call]]:
    """Each core entry point that takes ``now``, on an object that has seen a
    finite ``now`` already (1.0), as a call of the bad ``now``."""
    return {
        "Policy.submit": lambda: lambda now: _policy().submit(Request(prompt_tokens=1), now=now),
        "Policy.prepare": lambda: lambda now: _policy().prepare(Request(prompt_tokens=1), now=now),
        "Policy.enqueue": lambda: _prepared(lambda p, d, now: p.enqueue(d, now=now)),
        "Policy.refuse": lambda: _prepared(
            lambda p, d, now: p.refuse(d, Reason.RATE_LIMITED, "x", now=now)
        ),
        "Policy.withdraw": lambda: _prepared(lambda p, d, now: p.withdraw(d, now=now)),
        "Policy.dispatch": lambda: lambda now: _running_policy().dispatch(now=now),
        "Policy.first_token": lambda: lambda now: _running_policy().first_token("a", now=now),
        "Policy.mark": lambda: lambda now: _running_policy().mark("a", "schedule", now=now),
        "Policy.tokens": lambda: lambda now: _running_policy().tokens("a", 1, now=now),
        "Policy.finish": lambda: lambda now: _running_policy().finish("a", now=now),
        "Policy.cancel": lambda: lambda now: _running_policy().cancel("a", now=now),
        "Policy.observe": lambda: lambda now: _running_policy().observe(_SIGNALS, now=now),
        "Policy.evaluate": lambda: lambda now: _running_policy().evaluate(now=now),
        "Policy.diagnose": lambda: lambda now: _running_policy().diagnose(now=now),
        "Policy.statistics": lambda: lambda now: _running_policy().statistics(now=now),
        "Policy.can_start": lambda: lambda now: _running_policy().can_start(now=now),
        "TokenBucket()": lambda: lambda now: TokenBucket(1.0, 1.0, now=now),
        "TokenBucket.try_acquire": lambda: lambda now: _bucket().try_acquire(1.0, now=now),
        "TokenBucket.time_until": lambda: lambda now: _bucket().time_until(1.0, now=now),
        "TokenBucket.charge": lambda: lambda now: _bucket().charge(1.0, now=now),
        "TokenBucket.refund": lambda: lambda now: _bucket().refund(1.0, now=now),
        "TokenBucket.level": lambda: lambda now: _bucket().level(now=now),
        "TokenBucket.statistics": lambda: lambda now: _bucket().statistics(now=now),
        "TenantQuotas.acquire": lambda: _leased(
            lambda q, _, now: q.acquire("acme", _TIER, "chat", 1.0, now=now)
        ),
        "TenantQuotas.settle": lambda: _leased(lambda q, lease, now: q.settle(lease, 1.0, now=now)),
        "TenantQuotas.release": lambda: _leased(lambda q, lease, now: q.release(lease, now=now)),
        "TenantQuotas.tenant": lambda: _leased(lambda q, _, now: q.tenant("acme", now=now)),
        "KVReservation.try_reserve": lambda: lambda now: _kv().try_reserve("s", "chat", 1, now=now),
        "KVReservation.resize": lambda: lambda now: _kv().resize("r", 1, now=now),
        "KVReservation.release": lambda: lambda now: _kv().release("r", now=now),
        "KVReservation.observe": lambda: lambda now: _kv().observe(0.5, now=now),
        "DispatchPace.ready_at": lambda: lambda now: DispatchPace(10.0, 10.0).ready_at(now=now),
        "DispatchPace.ready": lambda: lambda now: DispatchPace(10.0, 10.0).ready(now=now),
        "DispatchPace.charge": lambda: lambda now: DispatchPace(10.0, 10.0).charge(1.0, now=now),
        "DispatchPace.backlog": lambda: lambda now: DispatchPace(10.0, 10.0).backlog(now=now),
        "FallbackLadder.update": lambda: lambda now: _ladder().update(Pressure(), now=now),
        "FallbackLadder.statistics": lambda: lambda now: _ladder().statistics(now=now),
        "SignalBoard.current": lambda: lambda now: SignalBoard().current(now=now),
        "SignalBoard.age": lambda: lambda now: SignalBoard().age("kv_usage", now=now),
        "EngineSignals.age": lambda: lambda now: EngineSignals(observed_at=1.0).age(now=now),
        "SLOTracker.record": lambda: lambda now: _tracker().record(finished(2.0), now=now),
        "SLOTracker.record_rejected": lambda: lambda now: _tracker().record_rejected(now=now),
        "SLOTracker.snapshot": lambda: lambda now: _tracker().snapshot(now=now),
        "SLOTracker.quantile": lambda: lambda now: _tracker().quantile("ttft", 0.5, now=now),
        "SLOTracker.span": lambda: lambda now: _tracker().span(now=now),
        "SLOTracker.burn_rates": lambda: lambda now: _tracker().burn_rates(now=now),
        "SLOTracker.alerts": lambda: lambda now: _tracker().alerts(now=now),
        "TrackerSet.record": lambda: lambda now: _trackers().record(finished(2.0), now=now),
        "TrackerSet.record_rejected": lambda: (
            lambda now: _trackers().record_rejected(
                "interactive",
                "acme",
                now=now,
            )
        ),
        "TrackerSet.snapshots": lambda: lambda now: _trackers().snapshots(now=now),
        "BurnWindows.record": lambda: lambda now: _burn().record(now=now, verdicts=[True]),
        "BurnWindows.rates": lambda: lambda now: _burn().rates(now=now),
        "BurnWindows.alerts": lambda: lambda now: _burn().alerts(now=now),
        "SlidingQuantiles.record": lambda: lambda now: _quantiles().record(1.0, now=now),
        "SlidingQuantiles.quantile": lambda: lambda now: _quantiles().quantile(0.5, now=now),
        "SlidingQuantiles.count": lambda: lambda now: _quantiles().count(now=now),
        "LatencyBudget.record": lambda: lambda now: LatencyBudget().record(None, {}, now=now),
        "LatencyBudget.breakdown": lambda: lambda now: LatencyBudget().breakdown(now=now),
    }


_CALLS = _calls()


# ``statistics(now=None)`` means "at the latest now seen".
_OPTIONAL = {"FallbackLadder.statistics", "Policy.statistics"}
_CASES = [
    pytest.param(entry, now, id=f"{entry}-{shown(now)[:20]}")
    for entry in sorted(_CALLS)
    for now in BAD_NOWS
    if not (now is None and entry in _OPTIONAL)
]


@pytest.mark.parametrize(("entry", "now"), _CASES)
def test_every_core_entry_point_refuses_a_bad_now_with_one_wording(entry: str, now: object) -> None:
    call = _CALLS[entry]()
    with pytest.raises(UsageError, match=r"^now must be "):
        call(now)


def test_a_good_now_passes_every_entry_point() -> None:
    for entry, make in _CALLS.items():
        try:
            make()(2.0)
        except UsageError as error:  # pragma: no cover - the message says which
            raise AssertionError(f"{entry}: {error}") from error


@pytest.mark.parametrize("now", [1.7e18, 1.7e15, 1.7e12, -1.7e12, 10**400])
def test_a_clock_in_the_wrong_unit_is_named_as_such(now: float) -> None:
    with pytest.raises(UsageError, match="nanoseconds") as info:
        check_now(now)
    assert "monotonic seconds within ±1e+11" in str(info.value)


def test_the_bound_keeps_sub_millisecond_resolution_and_admits_wall_clock_seconds() -> None:
    assert math.ulp(MAX_NOW) < 1e-4  # a queue wait added to now still moves it
    assert math.ulp(1.7e18) > 100  # what time.time_ns() values lose
    for now in (0, -1.0, 1.7e9, MAX_NOW, -MAX_NOW, 12345.678):
        check_now(now)
        assert time_problem(now) is None


@given(st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans(), st.none(), st.text()))
def test_the_fast_path_and_the_full_rule_agree(value: object) -> None:
    try:
        check_now(value)
    except UsageError:
        assert time_problem(value) is not None
    else:
        assert time_problem(value) is None


@given(st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans(), st.none(), st.text()))
def test_counts_have_one_rule(value: object) -> None:
    ok = count_problem(value, 1) is None
    assert ok == (type(value) is int and 1 <= value <= MAX_COUNT)
    if ok:
        check_count("n", value, minimum=1)
    else:
        with pytest.raises(UsageError, match=r"^n must be (an integer|>= 1 and <= 2\*\*53), got "):
            check_count("n", value, minimum=1)


def test_a_huge_int_is_shown_without_its_digits() -> None:
    assert shown(10**5000) == "an integer of about 5001 digits"
    assert shown("x" * 10_000).endswith("...")
    assert len(shown("x" * 10_000)) == 60


@pytest.mark.parametrize("bad", [math.nan, 1.7e18, 10**400, True])
def test_a_signal_time_follows_the_same_rule(bad: object) -> None:
    with pytest.raises(UsageError, match=r"^observed_at must be "):
        EngineSignals(observed_at=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "field", ["kv_usage", "tool_timeout_rate", "waiting", "decode_tps", "preemption_rate"]
)
@pytest.mark.parametrize("bad", [True, "0.5", 10**400, math.nan])
def test_a_signal_value_must_be_a_number(field: str, bad: object) -> None:
    with pytest.raises(UsageError, match=field):
        EngineSignals(observed_at=1.0, **{field: bad})  # type: ignore[arg-type]


_HUGE = 10**400  # an int: finite, but too large for a float

_OVERFLOWS: dict[str, Callable[[], object]] = {
    "TokenBucket(rate)": lambda: TokenBucket(_HUGE, 1.0),
    "TokenBucket(burst)": lambda: TokenBucket(1.0, _HUGE),
    "TokenBucket.try_acquire": lambda: _bucket().try_acquire(_HUGE, now=2.0),
    "TokenBucket.refund": lambda: _bucket().refund(_HUGE, now=2.0),
    "TenantQuotas.acquire": lambda: TenantQuotas().acquire("a", _TIER, "chat", _HUGE, now=1.0),
    "DispatchPace(rate)": lambda: DispatchPace(_HUGE, 1.0),
    "DispatchPace.charge": lambda: DispatchPace(1.0, 1.0).charge(_HUGE, now=1.0),
    "FairQueue.push": lambda: FairQueue[str](4).push("t", "x", weight=_HUGE),
    "KVReservation(num_blocks)": lambda: KVReservation(_HUGE, 16),
    "KVReservation.blocks_for": lambda: KVReservation(10, 16).blocks_for(_HUGE),
    "QuantileSketch.add": lambda: QuantileSketch().add(_HUGE),
    "QuantileSketch.add_many": lambda: QuantileSketch().add_many([1.0, _HUGE]),
    "SlidingQuantiles.record": lambda: SlidingQuantiles().record(_HUGE, now=1.0),
    "LatencyBudget.record": lambda: LatencyBudget().record(_HUGE, {}, now=1.0),
    "SLOTracker cost model": lambda: SLOTracker("lane", cost_model=lambda f: _HUGE).record(
        finished(1.0), now=1.0
    ),
    "CostWeights": lambda: CostWeights(beta=_HUGE),
}


@pytest.mark.parametrize("name", sorted(_OVERFLOWS))
def test_an_int_too_large_for_a_float_is_a_usage_error_not_an_overflow(name: str) -> None:
    # Each used to pass its check (10**400 < math.inf) and raise OverflowError
    # in the arithmetic after it, or in the check itself (math.isfinite).
    with pytest.raises(UsageError, match="digits"):
        _OVERFLOWS[name]()
