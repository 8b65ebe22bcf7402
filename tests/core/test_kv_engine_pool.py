"""The engine's own KV pool and the ledger (``KVReservation.observe_capacity``).

A ledger told the engine's pool decides, once what was live before has
ended, exactly as a ledger configured with the pool it counts: the engine's
where it follows the engine, else the smaller of the two. While the live
ones run, its accounting stays whole (each lane's draw on its floor and on
the shared pool) and nothing that ends leaks. The default config follows the
engine; a config's own ``kv.num_blocks`` is a cap.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slopolicy import (
    Admit,
    Demote,
    EngineSignals,
    Hold,
    Outcome,
    Policy,
    PolicyConfig,
    Reject,
    Request,
)
from slopolicy.config.describe import describe
from slopolicy.core.kv.ledger import KVReservation
from slopolicy.errors import UsageError

_LANES = ("interactive", "heavy", "background")
#: ``(lane, held, answer)`` starts.
_STARTS = st.lists(
    st.tuples(st.sampled_from(_LANES), st.integers(0, 300), st.integers(0, 80)), max_size=10
)


def _ledger(num_blocks: int, percents: dict[str, int], block_size: int) -> KVReservation:
    return KVReservation(num_blocks, block_size, {k: v / 100 for k, v in percents.items()})


def _consistent(kv: KVReservation) -> None:
    """Each lane's draw on its floor and on the shared pool, from its use."""
    stats = kv.statistics()
    floors = stats.reserved_by_lane
    assert stats.shared_blocks == stats.num_blocks - sum(floors.values())
    assert stats.used_blocks == sum(stats.used_by_lane.values())
    assert stats.shared_used_blocks == sum(
        max(0, use - floors.get(lane, 0)) for lane, use in stats.used_by_lane.items()
    )


@settings(max_examples=200, deadline=None)
@given(
    num_blocks=st.integers(1, 120),
    engine_blocks=st.integers(1, 160),
    block_size=st.sampled_from([1, 4, 16]),
    percents=st.fixed_dictionaries(
        {}, optional={"interactive": st.integers(0, 40), "heavy": st.integers(0, 30)}
    ),
    before=_STARTS,
    after=_STARTS,
    follow=st.booleans(),
)
def test_told_a_pool_it_decides_as_if_configured_with_the_one_it_counts(
    num_blocks: int,
    engine_blocks: int,
    block_size: int,
    percents: dict[str, int],
    before: list[tuple[str, int, int]],
    after: list[tuple[str, int, int]],
    follow: bool,
) -> None:
    reserves = {k: v / 100 for k, v in percents.items()}
    told = KVReservation(num_blocks, block_size, reserves, follow_engine=follow)
    counted = engine_blocks if follow else min(num_blocks, engine_blocks)
    alone = _ledger(counted, percents, block_size)
    live = [
        f"b{i}"
        for i, (lane, held, answer) in enumerate(before)
        if told.try_start(f"b{i}", lane, held + answer, held=held, now=0.0)
    ]
    # The engine's pool in tokens, not a whole number of blocks: it rounds down.
    told.observe_capacity(engine_blocks * block_size + block_size - 1)
    assert told.statistics().num_blocks == counted
    assert told.configured_blocks == num_blocks
    _consistent(told)
    for request_id in live:
        told.release(request_id, now=1.0)
        _consistent(told)
    assert told.statistics() == alone.statistics()
    for i, (lane, held, answer) in enumerate(after):
        request_id = f"a{i}"
        assert told.try_start(request_id, lane, held + answer, held=held, now=2.0) is (
            alone.try_start(request_id, lane, held + answer, held=held, now=2.0)
        )
        assert told.statistics() == alone.statistics()
        assert told.free_blocks(lane) == alone.free_blocks(lane)


def test_a_start_the_configured_pool_admits_waits_for_the_engines() -> None:
    kv = KVReservation(100, 16, {"interactive": 0.2})
    kv.observe_capacity(50 * 16)
    stats = kv.statistics()
    assert (stats.num_blocks, stats.reserved_by_lane["interactive"], stats.shared_blocks) == (
        50,
        10,
        40,
    )
    # 41 blocks of heavy at its forecast peak: the configured pool had room.
    assert not kv.try_start("r", "heavy", 41 * 16, held=16, now=0.0)
    assert kv.try_start("r", "heavy", 40 * 16, held=16, now=0.0)


def test_the_engines_reading_counts_against_its_own_pool() -> None:
    kv = KVReservation(100, 1)
    kv.observe_capacity(40)
    kv.observe(0.5, now=0.0)  # 20 of the engine's 40 blocks, none of them ours
    assert kv.statistics().engine_used_blocks == 20
    assert kv.free_blocks("heavy") == 20


def test_a_reading_in_force_keeps_its_fraction_when_the_pool_shrinks() -> None:
    kv = KVReservation(100, 1)
    kv.observe(0.5, now=0.0)
    kv.observe_capacity(40)
    assert kv.statistics().engine_used_blocks == 20


def test_a_larger_engine_pool_changes_nothing() -> None:
    kv = KVReservation(100, 16, {"interactive": 0.2})
    assert kv.try_start("r", "heavy", 30 * 16, held=16, now=0.0)
    before = kv.statistics()
    kv.observe_capacity(1_000 * 16)
    assert kv.statistics() == before


def test_a_pool_grows_back_to_at_most_the_configured_one() -> None:
    kv = KVReservation(100, 16)
    kv.observe_capacity(30 * 16)
    kv.observe_capacity(60 * 16)  # the engine restarted with more memory
    assert kv.statistics().num_blocks == 60
    kv.observe_capacity(15)  # less than a block: the ledger keeps one
    assert kv.statistics().num_blocks == 1


@pytest.mark.parametrize("tokens", [0, -1, 1.5, True, "800", None, 2**70])
def test_a_bad_capacity_raises_and_changes_nothing(tokens: object) -> None:
    kv = KVReservation(100, 16)
    before = kv.statistics()
    with pytest.raises(UsageError):
        kv.observe_capacity(tokens)  # type: ignore[arg-type]
    assert kv.statistics() == before


@pytest.mark.parametrize(("tokens", "blocks"), [(112_000, 7_000), (1_000_000, 62_500)])
def test_the_default_policy_follows_the_engines_pool(tokens: int, blocks: int) -> None:
    policy = Policy(PolicyConfig())
    assert policy.kv.statistics().num_blocks == 26_688  # until the engine says
    policy.observe(EngineSignals(observed_at=0.0, kv_capacity_tokens=tokens), now=0.0)
    stats = policy.kv.statistics()
    assert (stats.num_blocks, stats.block_size) == (blocks, 16)
    assert stats.reserved_by_lane["interactive"] == blocks // 5  # its 0.2, of the engine's pool


def test_a_configured_pool_is_a_cap() -> None:
    policy = Policy(PolicyConfig.from_dict({"kv": {"num_blocks": 20_000}}))
    policy.observe(EngineSignals(observed_at=0.0, kv_capacity_tokens=1_000_000), now=0.0)
    assert policy.kv.statistics().num_blocks == 20_000
    policy.observe(EngineSignals(observed_at=1.0, kv_capacity_tokens=112_000), now=1.0)
    assert policy.kv.statistics().num_blocks == 7_000


def test_a_config_that_follows_the_engine_round_trips() -> None:
    config = PolicyConfig()
    assert config.kv.num_blocks is None
    assert config.kv.capacity_tokens == 26_688 * 16
    again = PolicyConfig.from_dict(config.model_dump(mode="json"))
    assert again.kv.num_blocks is None
    assert again.to_spec().kv_follows_engine
    assert "KV pool: the engine's, as it reports it (26,688 blocks" in describe(again)


def test_a_pool_beyond_any_engines_is_counted_at_the_configs_bound() -> None:
    kv = KVReservation(100, 1, {"interactive": 0.2}, follow_engine=True)
    kv.observe_capacity(2**53)
    stats = kv.statistics()
    assert (stats.num_blocks, stats.reserved_by_lane["interactive"]) == (2**31 - 1, 429_496_729)


@pytest.mark.parametrize("tokens", [0, -5, 1.5, True, float("inf"), 2**53 + 1, 10**300])
def test_a_signal_with_a_bad_pool_is_refused(tokens: object) -> None:
    with pytest.raises(UsageError, match="kv_capacity_tokens"):
        EngineSignals(observed_at=0.0, kv_capacity_tokens=tokens)  # type: ignore[arg-type]


def test_a_request_queued_before_a_smaller_pool_ends_at_the_next_dispatch() -> None:
    policy = Policy(PolicyConfig())
    big = Request(id="big", tenant="t", lane="heavy", prompt_tokens=6_000, max_new_tokens=10)
    small = Request(id="small", tenant="t", lane="heavy", prompt_tokens=100, max_new_tokens=10)
    for request in (big, small):
        assert isinstance(policy.submit(request, now=0.0), Admit | Demote)
    # The engine says its pool is 4,000 tokens: "big" can never start there.
    policy.observe(EngineSignals(observed_at=0.0, kv_capacity_tokens=4_000), now=0.0)
    # The shorter goes first; on a cold start the prefill budget holds the
    # other until its first token (one prompt at a time).
    assert [s.id for s in policy.dispatch(now=0.0).started] == ["small"]
    policy.first_token("small", now=0.01)
    dispatch = policy.dispatch(now=0.01)
    assert [(f.id, f.outcome, f.held_by) for f in dispatch.expired] == [
        ("big", Outcome.EXPIRED, Hold.KV)
    ]
    # Submitted now, the same request is refused at once, by the pool known.
    again = policy.submit(Request(id="again", tenant="t", lane="heavy", prompt_tokens=6_000,
                                  max_new_tokens=10), now=0.0)  # fmt: skip
    assert isinstance(again, Reject)
    assert again.http_status == 413
