"""The peak check of SIMULATOR.md against stepping every request token by token."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy.core.kv.peak import peak_fits
from slopolicy.errors import UsageError

_RUNNING = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 40)), max_size=8)


def _peak_blocks(requests: list[tuple[int, int]], block_size: int) -> int:
    """Blocks held at the worst step, stepping every request one token at a time."""
    horizon = max((remaining for _, remaining in requests), default=0)
    return max(
        sum(-(-(length + t) // block_size) for length, remaining in requests if remaining >= t)
        for t in range(horizon + 1)
    )


@given(requests=_RUNNING, capacity=st.integers(0, 400))
def test_peak_fits_is_the_exact_peak_in_tokens(
    requests: list[tuple[int, int]], capacity: int
) -> None:
    assert peak_fits(requests, capacity) == (_peak_blocks(requests, 1) <= capacity)


@given(requests=_RUNNING, num_blocks=st.integers(0, 60), block_size=st.sampled_from([2, 16]))
def test_peak_fits_in_blocks_never_overcommits(
    requests: list[tuple[int, int]], num_blocks: int, block_size: int
) -> None:
    if peak_fits(requests, num_blocks * block_size, block_size=block_size):
        assert _peak_blocks(requests, block_size) <= num_blocks


@given(requests=_RUNNING, capacity=st.integers(0, 400))
def test_peak_fits_admits_whatever_the_worst_case_admits(
    requests: list[tuple[int, int]], capacity: int
) -> None:
    if sum(length + remaining for length, remaining in requests) <= capacity:
        assert peak_fits(requests, capacity)


def test_peak_fits_rejects_bad_input() -> None:
    assert peak_fits([], 0)
    for requests, capacity in (([(-1, 1)], 10), ([(1, -1)], 10), ([(1, 1)], -1)):
        with pytest.raises(UsageError):
            peak_fits(requests, capacity)
