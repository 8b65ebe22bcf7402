"""Time between tokens (TBT): the per-lane gap window, the per-request target, the policy's gaps."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slopolicy import Policy, PolicyConfig, UsageError
from slopolicy.config.describe import describe
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.request import Request
from slopolicy.core.slo.gaps import GapWindow
from slopolicy.core.slo.sketches import FOLD_AT
from slopolicy.core.slo.targets import STALL_S, SLOTargets, tbt_met
from slopolicy.core.slo.tracker import SLOTracker

_gaps = st.lists(
    st.floats(min_value=1e-4, max_value=30.0, allow_nan=False), min_size=1, max_size=600
)


def _exact(values: list[float], q: float) -> float:
    """The value of rank floor(q * (n - 1)): the sketch's definition."""
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


@settings(max_examples=60, deadline=None)
@given(_gaps, st.floats(min_value=0.01, max_value=2.0))
def test_window_p99_is_within_the_sketch_error_and_stalls_are_exact(
    gaps: list[float], stall: float
) -> None:
    window = GapWindow(stall, alpha=0.01)
    for k, gap in enumerate(gaps):
        window.record(gap, now=10.0 + k * 1e-3)  # all within one window
    now = 10.0 + len(gaps) * 1e-3
    for q in (0.5, 0.99):
        found = window.quantile(q, now=now)
        assert found is not None
        assert abs(found - _exact(gaps, q)) <= 0.01 * _exact(gaps, q) + 1e-12
    assert window.count(now=now) == len(gaps)
    assert window.stalls(now=now) == sum(gap >= stall for gap in gaps)
    summary = window.summary(now=now)
    assert summary is not None
    assert summary.max == max(gaps)


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=1, max_value=20_000), st.integers(min_value=1, max_value=40))
def test_window_memory_is_bounded_however_many_gaps_stream(gaps: int, seconds: int) -> None:
    window = GapWindow(STALL_S, window_s=10.0, slices=5, max_buckets=64)
    for k in range(gaps):
        window._add(1e-3 * (1 + k % 997), seconds * k / gaps)
    ring = window._window._ring
    assert len(ring._slots) == 5
    for piece in ring._slots:
        if piece is None:
            continue
        assert all(len(values) < FOLD_AT for values in piece.pending)
        assert piece.sketch(0).bucket_count <= 64


def test_the_window_forgets_gaps_older_than_it() -> None:
    window = GapWindow(0.2, window_s=10.0, slices=10)
    window.record(5.0, now=0.0)
    window.record(0.01, now=10.5)
    assert window.stalls(now=10.5) == 0
    assert window.quantile(0.99, now=10.5) == pytest.approx(0.01, rel=0.01)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_a_bad_gap_raises_and_changes_nothing(bad: float) -> None:
    window = GapWindow(0.2)
    with pytest.raises(UsageError, match="token gap"):
        window.record(bad, now=1.0)
    tracker = SLOTracker("chat", SLOTargets(tbt_p99=0.1))
    with pytest.raises(UsageError, match="token gap"):
        tracker.record_gap(bad, now=1.0)
    assert window.count(now=1.0) == 0
    assert tracker.snapshot(now=1.0).tbt is None


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=400))
def test_tbt_met_is_the_requests_nearest_rank_p99_within_the_target(gaps: list[float]) -> None:
    target = 0.5
    ordered = sorted(gaps)
    p99 = ordered[math.ceil(0.99 * len(ordered)) - 1]  # nearest rank
    slow = sum(gap > target for gap in gaps)
    assert tbt_met(len(gaps), slow) == (p99 <= target)


@pytest.mark.parametrize("field", ["tbt_p99", "tbt_stall"])
@pytest.mark.parametrize("bad", [0.0, -0.1, math.nan, math.inf])
def test_bad_tbt_targets_raise(field: str, bad: float) -> None:
    with pytest.raises(UsageError, match=field):
        SLOTargets(**{field: bad})


def test_the_stall_threshold_defaults_to_the_target_then_0_2_s() -> None:
    assert SLOTargets().stall_threshold == STALL_S == 0.2
    assert SLOTargets(tbt_p99=0.1).stall_threshold == 0.1
    assert SLOTargets(tbt_p99=0.1, tbt_stall=0.5).stall_threshold == 0.5
    assert SLOTargets().slow_gap == math.inf


def _finished(gaps: int, slow: int) -> Finished:
    return Finished(
        id="r",
        tenant="t",
        lane="chat",
        outcome=Outcome.COMPLETED,
        arrival=0.0,
        finished_at=2.0,
        queue_wait=0.0,
        ttft=0.1,
        tpot=0.01,
        prompt_tokens=10,
        output_tokens=50,
        cost=1.0,
        stages={},
        gaps=gaps,
        slow_gaps=slow,
    )


def test_a_slow_gap_misses_the_slo_only_where_the_lane_has_the_target() -> None:
    with_target = SLOTracker("chat", SLOTargets(tbt_p99=0.1))
    without = SLOTracker("chat", SLOTargets())
    for tracker in (with_target, without):
        tracker.record(_finished(49, 1), now=2.0)  # one slow gap in 49: its p99 is that gap
        tracker.record(_finished(200, 2), now=2.0)  # 2 in 200: within 1%
    assert with_target.snapshot(now=2.0).attained == 1
    assert without.snapshot(now=2.0).attained == 2
    with pytest.raises(UsageError, match="slow_gaps"):
        with_target.record(_finished(1, 2), now=2.0)


def _policy(tbt_p99_s: float | None) -> Policy:
    slo = {"ttft_p95_s": 5.0} if tbt_p99_s is None else {"ttft_p95_s": 5.0, "tbt_p99_s": tbt_p99_s}
    config = PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "slo": slo}],
            "kv": {"num_blocks": 400, "block_size": 16},
            "engine": {"max_running": 4},
            "ladder": {"enabled": False},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _stream(policy: Policy, name: str, times: list[float], counts: list[int]) -> Finished:
    """Submit, start and stream ``name``: chunk ``k`` of ``counts[k]`` tokens at ``times[k]``."""
    policy.submit(Request(id=name, tenant="t", prompt_tokens=20, max_new_tokens=64), now=times[0])
    assert [s.id for s in policy.dispatch(now=times[0])] == [name]
    gaps = [policy.tokens(name, count, now=at) for at, count in zip(times, counts, strict=True)]
    assert gaps[0] is None  # the first chunk ends no gap
    assert gaps[1:] == pytest.approx([b - a for a, b in itertools.pairwise(times)])
    return policy.finish(name, now=times[-1])


def test_the_policy_measures_gaps_between_chunks_and_judges_them() -> None:
    policy = _policy(tbt_p99_s=0.1)
    # 4-token chunks 50 ms apart, one 2 s stall mid-stream: a chunk is one arrival.
    times = [1.0, 1.05, 1.1, 3.1, 3.15]
    finished = _stream(policy, "stalled", times, [4, 4, 4, 4, 4])
    assert (finished.gaps, finished.slow_gaps) == (4, 1)
    assert finished.tpot is not None
    assert finished.tpot < 0.15
    smooth = _stream(policy, "smooth", [4.0, 4.05, 4.1], [1, 1, 1])
    assert (smooth.gaps, smooth.slow_gaps) == (2, 0)
    snapshot = policy.slo_trackers.lane("chat").snapshot(now=4.1)
    assert snapshot.completed == 2
    assert snapshot.attained == 1  # the stalled one missed its TBT target
    assert snapshot.tbt_stalls == 1  # the stall threshold is the target
    assert snapshot.tbt is not None
    assert snapshot.tbt.count == 6
    assert snapshot.tbt.max == pytest.approx(2.0)
    # p99 of six gaps is the second largest (rank floor(0.99 * 5)): 50 ms.
    assert snapshot.tbt.p99 == pytest.approx(0.05, rel=0.01)
    assert snapshot.tbt_p99_fraction == pytest.approx(snapshot.tbt.p99 / 0.1)
    assert policy.statistics().tbt_p99["chat"] == snapshot.tbt.p99


def test_without_a_target_gaps_are_measured_and_judge_nothing() -> None:
    policy = _policy(tbt_p99_s=None)
    finished = _stream(policy, "stalled", [1.0, 1.05, 3.05], [1, 1, 1])
    assert (finished.gaps, finished.slow_gaps) == (2, 0)
    snapshot = policy.slo_trackers.lane("chat").snapshot(now=3.05)
    assert snapshot.attained == 1
    assert snapshot.tbt_stalls == 1  # 2 s >= the default 0.2 s
    assert snapshot.tbt_p99_fraction is None


def test_a_chunk_of_no_tokens_and_first_token_end_no_gap() -> None:
    policy = _policy(tbt_p99_s=0.1)
    policy.submit(Request(id="r", tenant="t", prompt_tokens=20, max_new_tokens=64), now=0.0)
    policy.dispatch(now=0.0)
    policy.first_token("r", now=0.5)
    assert policy.tokens("r", 1, now=0.5) is None  # the same first token, counted
    assert policy.tokens("r", 0, now=0.6) is None
    assert policy.tokens("r", 1, now=0.7) == pytest.approx(0.1)
    assert policy.statistics().tbt_p99 == {"chat": pytest.approx(0.1, rel=0.01)}


def test_statistics_before_any_call_have_no_tbt() -> None:
    assert _policy(tbt_p99_s=0.1).statistics().tbt_p99 == {"chat": None}


def test_the_config_carries_the_tbt_targets_and_describes_them() -> None:
    config = PolicyConfig.from_dict(
        {"lanes": [{"name": "chat", "slo": {"tbt_p99_s": 0.1, "tbt_stall_s": 0.5}}]}
    )
    targets = config.lanes[0].slo.to_targets()
    assert (targets.tbt_p99, targets.stall_threshold) == (0.1, 0.5)
    assert "TBT p99 100 ms" in describe(config)
    assert PolicyConfig().lanes[0].slo.to_targets().tbt_p99 is None  # nothing changes by default


def _laddered(tbt_p99_s: float | None) -> Policy:
    slo = {"ttft_p95_s": 5.0} if tbt_p99_s is None else {"ttft_p95_s": 5.0, "tbt_p99_s": tbt_p99_s}
    config = PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "slo": slo}, {"name": "batch"}],
            "ladder": {"tbt_p99_fraction": {"enter": 1.0, "exit": 0.5}},
        }
    )
    return Policy(config, counter=HeuristicCounter())


@pytest.mark.parametrize("tbt_p99_s", [0.1, None])
def test_the_tbt_trigger_climbs_on_the_watched_lanes_p99_gap(tbt_p99_s: float | None) -> None:
    policy = _laddered(tbt_p99_s)
    policy.submit(Request(id="r", tenant="t", prompt_tokens=20, max_new_tokens=64), now=0.0)
    policy.dispatch(now=0.0)
    for k in range(20):  # every gap 0.3 s: three times the target
        policy.tokens("r", 1, now=0.3 * k)
    policy.finish("r", now=6.0)
    event = policy.evaluate(now=6.0)
    if tbt_p99_s is None:  # no target: the trigger reads 0
        assert event is None
        return
    assert event is not None
    (reading,) = event.readings
    assert reading.trigger == "tbt_p99_fraction"
    assert reading.value == pytest.approx(3.0, rel=0.01)
