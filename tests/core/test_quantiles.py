from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy.core.slo.quantiles import QuantileSketch
from slopolicy.errors import UsageError

# Float rounding in log() can put a value on a bucket edge into the neighbour,
# which is still within alpha up to about 1e-15 relative.
SLACK = 1e-9
QS = (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)

_positive = st.floats(min_value=1e-9, max_value=1e12, allow_nan=False, allow_infinity=False)
_alphas = st.sampled_from([0.001, 0.01, 0.02, 0.05])


def exact(values: list[float], q: float) -> float:
    """The documented rank: floor(q * (n - 1)) of the sorted values."""
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


def assert_within(answer: float | None, truth: float, alpha: float) -> None:
    assert answer is not None
    assert abs(answer - truth) <= (alpha + SLACK) * truth, (answer, truth)


@given(st.lists(_positive, min_size=1, max_size=300), _alphas)
def test_every_quantile_is_within_the_relative_error_bound(
    values: list[float], alpha: float
) -> None:
    sketch = QuantileSketch(alpha)
    for value in values:
        sketch.add(value)
    for q in QS:
        assert_within(sketch.quantile(q), exact(values, q), alpha)
    assert sketch.count == len(values)
    assert sketch.min == min(values)
    assert sketch.max == max(values)
    assert sketch.sum == pytest.approx(math.fsum(values))


@given(st.lists(_positive, min_size=1, max_size=200), st.lists(_positive, max_size=200))
def test_merging_is_the_same_as_recording_everything_in_one(
    left: list[float], right: list[float]
) -> None:
    a, b, whole = QuantileSketch(), QuantileSketch(), QuantileSketch()
    for value in left:
        a.add(value)
        whole.add(value)
    for value in right:
        b.add(value)
        whole.add(value)
    a.merge(b)
    assert a.quantiles(QS) == whole.quantiles(QS)
    assert a.count == whole.count
    for q in QS:
        assert_within(a.quantile(q), exact(left + right, q), 0.01)


@given(
    st.lists(_positive, min_size=1, max_size=300),
    st.integers(min_value=2, max_value=20),
)
def test_collapsing_bounds_memory_and_keeps_the_bound_above_the_floor(
    values: list[float], max_buckets: int
) -> None:
    sketch = QuantileSketch(0.01, max_buckets=max_buckets)
    for value in values:
        sketch.add(value)
    assert sketch.bucket_count <= max_buckets
    floor = sketch.collapsed_below
    for q in QS:
        truth = exact(values, q)
        answer = sketch.quantile(q)
        assert answer is not None
        if floor is None or truth > floor:
            assert_within(answer, truth, 0.01)
        else:  # collapsed: overestimated, never under
            assert answer >= truth * (1 - 0.01 - SLACK)


def test_a_spread_past_the_limit_collapses_the_lowest_buckets() -> None:
    sketch = QuantileSketch(0.01, max_buckets=10)
    for exponent in range(20):
        sketch.add(10.0**exponent)
    assert sketch.bucket_count == 10
    floor = sketch.collapsed_below
    assert floor is not None
    assert 1e9 < floor < 1e11
    # Below the floor the answer is the floor's value: an overestimate, as documented.
    assert sketch.quantile(0.0) == pytest.approx(floor, rel=0.01)
    assert sketch.min == 1.0
    assert_within(sketch.quantile(1.0), 1e19, 0.01)


@given(st.lists(st.floats(min_value=0, max_value=1e-9, exclude_max=True), min_size=1))
def test_values_below_min_value_are_answered_as_zero_within_it(values: list[float]) -> None:
    sketch = QuantileSketch()
    for value in values:
        sketch.add(value)
    for q in QS:
        answer = sketch.quantile(q)
        assert answer is not None
        assert abs(answer - exact(values, q)) < sketch.min_value


def test_zeros_mixed_with_latencies() -> None:
    sketch = QuantileSketch()
    for value in [0.0] * 10 + [1.0] * 10:
        sketch.add(value)
    assert sketch.quantile(0.4) == 0.0
    assert_within(sketch.quantile(0.6), 1.0, 0.01)
    assert sketch.bucket_count == 2


@given(
    st.lists(st.one_of(_positive, st.just(0.0), st.floats(0, 1e-10)), max_size=300),
    st.lists(st.one_of(_positive, st.just(0.0)), max_size=300),
    st.integers(min_value=2, max_value=40),
)
def test_adding_many_at_once_is_adding_each(
    before: list[float], batch: list[float], max_buckets: int
) -> None:
    """Same counts, bounds and answers, collapsed or not (the floor ends where
    adding one by one would have put it once the batch is counted)."""
    one, many = QuantileSketch(max_buckets=max_buckets), QuantileSketch(max_buckets=max_buckets)
    for value in before:
        one.add(value)
        many.add(value)
    many.add_many(batch)
    for value in batch:
        one.add(value)
    assert (many.count, many.min, many.max) == (one.count, one.min, one.max)
    assert many.sum == pytest.approx(one.sum)
    assert many.bucket_count <= max_buckets + 1
    if one.collapsed_below is None and many.collapsed_below is None:
        assert many.quantiles(QS) == one.quantiles(QS)
    values = before + batch
    floor = many.collapsed_below
    for q in QS if values else ():
        truth = exact(values, q)
        if truth >= many.min_value and (floor is None or truth > floor):
            assert_within(many.quantile(q), truth, 0.01)


@pytest.mark.parametrize("bad", [-1.0, -1e-300, math.nan, math.inf])
def test_a_bad_value_in_a_batch_is_refused_and_changes_nothing(bad: float) -> None:
    sketch = QuantileSketch()
    sketch.add(1.0)
    with pytest.raises(UsageError, match="finite values >= 0"):
        sketch.add_many([2.0, bad, 3.0])
    assert (sketch.count, sketch.sum, sketch.max) == (1, 1.0, 1.0)
    sketch.add_many([])
    assert sketch.count == 1


@pytest.mark.parametrize("bad", [-1.0, -1e-300, math.nan, math.inf])
def test_negative_and_non_finite_values_are_refused_and_change_nothing(bad: float) -> None:
    sketch = QuantileSketch()
    sketch.add(1.0)
    with pytest.raises(UsageError, match="finite values >= 0"):
        sketch.add(bad)
    assert sketch.count == 1
    assert sketch.quantile(0.5) == 1.0


def test_empty_sketch_answers_none() -> None:
    sketch = QuantileSketch()
    assert sketch.quantile(0.5) is None
    assert sketch.quantiles((0.1, 0.9)) == (None, None)
    assert (sketch.mean, sketch.min, sketch.max) == (None, None, None)


@pytest.mark.parametrize("q", [-0.1, 1.1, math.nan])
def test_quantiles_outside_zero_one_are_misuse(q: float) -> None:
    sketch = QuantileSketch()
    sketch.add(1.0)
    with pytest.raises(UsageError, match=r"\[0, 1\]"):
        sketch.quantile(q)


@pytest.mark.parametrize(
    "kwargs",
    [{"alpha": 0.0}, {"alpha": 1.0}, {"max_buckets": 1}, {"min_value": 0.0}],
)
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(UsageError):
        QuantileSketch(**kwargs)  # type: ignore[arg-type]


def test_only_like_sketches_merge() -> None:
    with pytest.raises(UsageError, match="same alpha"):
        QuantileSketch(0.01).merge(QuantileSketch(0.02))


def test_copies_are_independent() -> None:
    sketch = QuantileSketch()
    sketch.add(1.0)
    twin = sketch.copy()
    twin.add(100.0)
    assert sketch.count == 1
    assert twin.count == 2
    sketch.clear()
    assert sketch.count == 0
    assert twin.quantile(1.0) == 100.0
