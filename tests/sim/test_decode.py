from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from slopolicy.sim._decode import DecodePool, Seq


def _blocks(tokens: int, size: int) -> int:
    return -(-tokens // size)


@given(
    size=st.sampled_from([1, 4, 16]),
    members=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 50)), min_size=1, max_size=12),
    offset=st.integers(0, 40),
    k=st.integers(0, 200),
    free=st.integers(0, 500),
)
def test_block_counts_match_a_member_by_member_count(
    size: int, members: list[tuple[int, int]], offset: int, k: int, free: int
) -> None:
    pool = DecodePool(size)
    pool.step(offset)  # members join at a non-zero step counter
    seqs = []
    for order, (prompt, out) in enumerate(members):
        seq = Seq(f"r{order}", prompt, out + 10_000, 0, order)
        seq.out = out
        pool.add(seq)
        seqs.append(seq)
    contexts = [pool.context_of(s) for s in seqs]
    assert pool.blocks == sum(_blocks(c, size) for c in contexts)
    expected = sum(_blocks(c + k, size) - _blocks(c, size) for c in contexts)
    assert pool.new_blocks(k) == expected
    most = pool.max_steps(free)
    assert most is not None
    assert pool.new_blocks(most) <= free < pool.new_blocks(most + 1)


def test_members_finish_in_order_and_leave_the_totals() -> None:
    pool = DecodePool(16)
    short, long = Seq("s", 10, 3, 0, 1), Seq("l", 10, 9, 0, 2)
    short.out = long.out = 1
    pool.add(short)
    pool.add(long)
    assert pool.steps_to_finish() == 2
    assert pool.step(2) == [short]
    assert short.out == 3
    assert (pool.count, pool.context, pool.blocks) == (1, 10 + 3, 1)
    assert pool.step(6) == [long]
    assert (pool.count, pool.context, pool.blocks) == (0, 0, 0)
    assert pool.max_steps(5) is None
