"""KVShares: each tenant's max-min share of the KV pool by its averaged need,
and a start past it allowed only from room no other tenant is owed."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy.core.kv.shares import KVShares, TenantKV
from slopolicy.errors import UsageError


def _shares(pool: int, tenants: dict[str, TenantKV], *, now: float = 0.0) -> KVShares:
    shares = KVShares(pool, 30.0)
    shares.refresh(tenants, now=now)
    return shares


def test_needs_that_fit_the_pool_share_nothing_out() -> None:
    shares = _shares(
        100,
        {
            "a": TenantKV(weight=1.0, held=40, queued=20),
            "b": TenantKV(weight=1.0, held=10, queued=0),
        },
    )
    assert shares.level == math.inf
    assert shares.owed() == 20.0  # a's queued need: owed, but nobody is past a share
    assert shares.allows("a", 90, weight=1.0, free=0)


def test_the_level_is_max_min_by_weight() -> None:
    # Needs 80, 30 and 10 of 100: 10 and 30 are met, the rest (60) is a's.
    shares = _shares(
        100,
        {
            "a": TenantKV(weight=1.0, held=80, queued=0),
            "b": TenantKV(weight=1.0, held=0, queued=30),
            "c": TenantKV(weight=1.0, held=0, queued=10),
        },
    )
    assert shares.level == pytest.approx(60.0)
    # b and c hold nothing of their shares: 40 blocks are owed them.
    assert shares.owed() == pytest.approx(40.0)
    assert shares.owed("a") == pytest.approx(40.0)
    assert shares.owed("b") == pytest.approx(10.0)
    # Weight 2 for a: the level per weight is 30 (a's share 60 holds at 80 > 60).
    weighted = _shares(
        100,
        {
            "a": TenantKV(weight=2.0, held=80, queued=0),
            "b": TenantKV(weight=1.0, held=0, queued=50),
        },
    )
    assert weighted.level == pytest.approx(100 / 3)


def test_a_tenant_past_its_share_takes_only_room_nobody_is_owed() -> None:
    shares = _shares(
        100,
        {
            "a": TenantKV(weight=1.0, held=80, queued=10),
            "b": TenantKV(weight=1.0, held=0, queued=40),
        },
    )
    assert shares.level == pytest.approx(60.0)  # b's 40 met, the rest a's
    # a holds 80 > 60; b is owed its 40. With 45 free a 5-block start leaves 40.
    assert shares.allows("a", 5, weight=1.0, free=45)
    assert not shares.allows("a", 6, weight=1.0, free=45)
    # b is within its share: allowed whatever is free.
    assert shares.allows("b", 40, weight=1.0, free=0)
    # Once b holds its share, nobody is owed: a may fill the pool.
    shares.started("b", 40)
    assert shares.owed("a") == 0.0
    assert shares.allows("a", 20, weight=1.0, free=20)


def test_a_start_counts_until_the_next_refresh_reads_the_book() -> None:
    shares = _shares(
        100,
        {
            "a": TenantKV(weight=1.0, held=60, queued=0),
            "b": TenantKV(weight=1.0, held=0, queued=60),
        },
    )
    assert shares.owed() == pytest.approx(50.0)
    shares.started("b", 30)
    assert shares.owed() == pytest.approx(20.0)
    shares.started("b", 30)  # past its share: owed nothing, never negative
    assert shares.owed() == 0.0
    shares.started("new", 7)  # unseen at the refresh: holds, owed nothing
    assert shares.owed() == 0.0


def test_the_need_is_averaged_over_the_window() -> None:
    shares = KVShares(100, 10.0)
    shares.refresh({"a": TenantKV(weight=1.0, held=50, queued=0)}, now=0.0)
    assert shares.need("a") == 50.0  # the first sample stands for the window
    shares.refresh({}, now=10.0)  # gone for one window: e^-1 of it left
    assert shares.need("a") == pytest.approx(50.0 * math.exp(-1.0))
    shares.refresh({}, now=200.0)
    assert shares.need("a") == 0.0  # negligible and taking nothing: forgotten
    assert shares.need("never") == 0.0


def test_a_request_that_gave_up_counts_as_held_fading_with_the_window() -> None:
    shares = KVShares(100, 10.0)
    shares.refresh({"a": TenantKV(weight=1.0, held=100, queued=0)}, now=0.0)
    # b's request waited for 30 blocks and gave up at 0 s: from the next
    # refresh b's need counts them as held from then, fading over the window.
    shares.gave_up("b", 30, weight=2.0, now=0.0)
    shares.refresh({"a": TenantKV(weight=1.0, held=100, queued=0)}, now=10.0)
    kept = math.exp(-1.0)
    assert shares.need("b") == pytest.approx(30.0 * kept * (1.0 - kept))
    # The needs exceed the pool: a (weight 1) holds past its share, b
    # (weight 2, known from its request) is owed at once what it gave up,
    # faded (more than its average has taken in yet).
    assert shares.level < math.inf
    assert shares.owed("a") == pytest.approx(30.0 * kept)
    assert shares.owed("a") > shares.need("b")
    free = math.floor(shares.owed("a")) + 5
    assert not shares.allows("a", 6, weight=1.0, free=free)
    # Two more gave up later: the faded blocks add up.
    shares.gave_up("b", 30, weight=2.0, now=20.0)
    shares.refresh({"a": TenantKV(weight=1.0, held=100, queued=0)}, now=20.0)
    assert shares.need("b") > 30.0 * kept * (1.0 - kept)
    # Nothing live and nothing given up lately: forgotten.
    shares.refresh({}, now=1000.0)
    assert shares.need("b") == 0.0


def test_a_tenant_within_its_share_is_owed_room_for_its_recent_burst() -> None:
    # a fills the pool; b, new, queues a burst of 40 blocks: its average need
    # has taken in a tenth of it, its peak all of it.
    shares = KVShares(100, 10.0)
    shares.refresh({"a": TenantKV(weight=1.0, held=100, queued=0)}, now=0.0)
    burst = {
        "a": TenantKV(weight=1.0, held=100, queued=0),
        "b": TenantKV(weight=1.0, held=0, queued=40),
    }
    shares.refresh(burst, now=1.0, protected={"b"})
    kept = math.exp(-0.1)
    assert shares.need("b") == pytest.approx(40.0 * (1.0 - kept))
    assert shares.level < math.inf
    assert shares.owed("a") == pytest.approx(40.0)  # the burst, not the average
    assert shares.allows("a", 5, weight=1.0, free=45)
    assert not shares.allows("a", 5, weight=1.0, free=44)
    # Its turns started or left: what it is owed fades with the window.
    shares.refresh({"a": TenantKV(weight=1.0, held=100, queued=0)}, now=2.0, protected={"b"})
    assert shares.owed("a") == pytest.approx(40.0 * kept)
    # Not protected (over its share of the engine, or the engine keeps up):
    # owed its average only.
    plain = KVShares(100, 10.0)
    plain.refresh({"a": TenantKV(weight=1.0, held=100, queued=0)}, now=0.0)
    plain.refresh(burst, now=1.0, protected={"a"})
    assert plain.owed("a") == pytest.approx(40.0 * (1.0 - kept))
    assert plain.allows("a", 5, weight=1.0, free=9)


def _level(needs: dict[str, float], weights: dict[str, float], pool: int) -> float:
    """The max-min level of ``needs`` over ``pool``, by bisection."""
    if sum(needs.values()) <= pool:
        return math.inf
    low, high = 0.0, max(need / weights[name] for name, need in needs.items())
    for _ in range(200):
        mid = (low + high) / 2
        filled = sum(min(need, weights[name] * mid) for name, need in needs.items())
        low, high = (mid, high) if filled < pool else (low, mid)
    return (low + high) / 2


_rounds = st.lists(
    st.tuples(
        st.floats(0.0, 8.0),  # seconds since the round before
        st.dictionaries(
            st.sampled_from("abcd"),
            st.tuples(st.integers(0, 300), st.integers(0, 300)),  # held, queued
            max_size=4,
        ),
        st.frozensets(st.sampled_from("abcd")),  # protected
    ),
    min_size=1,
    max_size=8,
)


@given(pool=st.integers(1, 600), rounds=_rounds, tenant=st.sampled_from("abcde"))
def test_what_is_owed_follows_each_tenant_s_average_and_peak(
    pool: int, rounds: list[tuple[float, dict[str, tuple[int, int]], frozenset[str]]], tenant: str
) -> None:
    # A model of the refreshes: each tenant's averaged need and fading peak
    # (the first sample stands for the window), owed up to its peak if
    # protected.
    window = 10.0
    shares = KVShares(pool, window)
    need: dict[str, float] = {}
    peak: dict[str, float] = {}
    now, first = 0.0, True
    for step, took, protected in rounds:
        now += step
        shares.refresh(
            {name: TenantKV(weight=1.0, held=h, queued=q) for name, (h, q) in took.items()},
            now=now,
            protected=protected,
        )
        kept = 0.0 if first else math.exp(-step / window)
        first = False
        for name in took.keys() - need.keys():
            need[name] = peak[name] = 0.0
        for name in list(need):
            sample = float(sum(took.get(name, (0, 0))))
            need[name] = need[name] * kept + sample * (1.0 - kept)
            peak[name] = max(sample, peak[name] * kept)
            if name not in took and need[name] < 1e-3:
                del need[name], peak[name]
        for name, value in need.items():
            assert shares.need(name) == pytest.approx(value, rel=1e-9, abs=1e-9)
    held = {name: h for name, (h, _) in took.items()}
    weights = dict.fromkeys(need, 1.0)
    level = _level(need, weights, pool)
    if level == math.inf:
        assert shares.level == math.inf
    else:
        assert shares.level == pytest.approx(level, rel=1e-6)
    wants = {
        name: max(need[name], peak[name]) if name in protected else need[name] for name in need
    }
    others = sum(
        max(0.0, min(want, level) - held.get(name, 0))  # the model's level, not the object's
        for name, want in wants.items()
        if name != tenant
    )
    assert shares.owed(tenant) == pytest.approx(others, rel=1e-6, abs=1e-6)


def test_refreshes_are_a_twentieth_of_the_window_apart() -> None:
    shares = KVShares(100, 20.0)
    assert shares.due(now=0.0)
    shares.refresh({}, now=0.3)
    assert not shares.due(now=0.9)
    assert shares.due(now=1.0)


def test_a_clock_that_went_back_ages_nothing() -> None:
    shares = KVShares(100, 10.0)
    shares.refresh({"a": TenantKV(weight=1.0, held=50, queued=0)}, now=10.0)
    shares.refresh(
        {"a": TenantKV(weight=1.0, held=0, queued=0)}, now=5.0
    )  # counts as at 10 s: no time passed
    assert shares.need("a") == 50.0
    shares.refresh({"a": TenantKV(weight=1.0, held=0, queued=0)}, now=20.0)  # one window from 10 s
    assert shares.need("a") == pytest.approx(50.0 * math.exp(-1.0))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: KVShares(0, 1.0), "num_blocks"),
        (lambda: KVShares(True, 1.0), "num_blocks"),
        (lambda: KVShares(10, 0.0), "window_s"),
        (lambda: KVShares(10, math.nan), "window_s"),
        (lambda: KVShares(10, 5e-324), "window_s"),  # its refresh tick would underflow
        (lambda: KVShares(10, 1.0).refresh({"a": (1.0, 2, 3)}, now=0.0), "TenantKV"),  # type: ignore[dict-item]
        (
            lambda: KVShares(10, 1.0).refresh(
                {"a": TenantKV(weight=0.0, held=2, queued=3)}, now=0.0
            ),
            "weight",
        ),
        (
            lambda: KVShares(10, 1.0).refresh(
                {"a": TenantKV(weight=1.0, held=-1, queued=3)}, now=0.0
            ),
            "blocks",
        ),
        (
            lambda: KVShares(10, 1.0).refresh(
                {"a": TenantKV(weight=1.0, held=1, queued=2.5)},  # type: ignore[arg-type]
                now=0.0,
            ),
            "blocks",
        ),
        (lambda: KVShares(10, 1.0).refresh({}, now=math.inf), "now"),
        (lambda: KVShares(10, 1.0).allows("a", -1, weight=1.0, free=3), "blocks"),
        (lambda: KVShares(10, 1.0).allows("a", 1, weight=1.0, free=None), "free"),  # type: ignore[arg-type]
        (lambda: KVShares(10, 1.0).allows("a", 1, weight=-1.0, free=3), "weight"),
        (lambda: KVShares(10, 1.0).started("a", -2), "blocks"),
        (lambda: KVShares(10, 1.0).gave_up("", 2, weight=1.0, now=0.0), "tenant"),
        (lambda: KVShares(10, 1.0).gave_up("a", -2, weight=1.0, now=0.0), "blocks"),
        (lambda: KVShares(10, 1.0).gave_up("a", 2, weight=0.0, now=0.0), "weight"),
        (lambda: KVShares(10, 1.0).gave_up("a", 2, weight=1.0, now=math.nan), "now"),
        (lambda: KVShares(10, 1.0).due(now=math.nan), "now"),
        (lambda: KVShares(10, 1.0).refresh({}, now=0.0, protected="ab"), "protected"),
        (lambda: KVShares(10, 1.0).refresh({}, now=0.0, protected=[1]), "protected"),  # type: ignore[list-item]
        (lambda: KVShares(10, 1.0).refresh({}, now=0.0, protected=None), "protected"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_is_refused(call: Any, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        call()


def test_bad_input_to_a_refresh_changes_nothing() -> None:
    shares = _shares(
        100,
        {
            "a": TenantKV(weight=1.0, held=80, queued=0),
            "b": TenantKV(weight=1.0, held=0, queued=40),
        },
    )
    level, owed = shares.level, shares.owed()
    with pytest.raises(UsageError):
        shares.refresh(
            {
                "a": TenantKV(weight=1.0, held=0, queued=0),
                "b": TenantKV(weight=1.0, held=-5, queued=0),
            },
            now=1.0,
        )
    assert (shares.level, shares.owed(), shares.need("a")) == (level, owed, 80.0)


def test_a_bad_give_up_changes_nothing() -> None:
    shares = _shares(100, {"a": TenantKV(weight=1.0, held=80, queued=0)})
    with pytest.raises(UsageError):
        shares.gave_up("b", 30, weight=-1.0, now=0.0)
    shares.refresh({"a": TenantKV(weight=1.0, held=80, queued=0)}, now=1.0)
    assert shares.need("b") == 0.0


_takes = st.dictionaries(
    st.sampled_from("abcdefgh"),
    st.builds(
        TenantKV,
        weight=st.sampled_from([0.5, 1.0, 2.0, 3.0]),
        held=st.integers(0, 400),
        queued=st.integers(0, 400),
    ),
    max_size=8,
)


@given(pool=st.integers(1, 1000), takes=_takes)
def test_the_shares_fill_the_pool_exactly_when_the_needs_exceed_it(
    pool: int, takes: dict[str, TenantKV]
) -> None:
    shares = _shares(pool, takes)
    needs = {name: float(took.held + took.queued) for name, took in takes.items()}
    level = shares.level
    if sum(needs.values()) <= pool:
        assert level == math.inf
        return
    filled = sum(min(need, takes[name].weight * level) for name, need in needs.items())
    assert filled == pytest.approx(pool, rel=1e-9)


@given(
    pool=st.integers(1, 1000),
    takes=_takes,
    gave_up=st.lists(st.tuples(st.sampled_from("abcdefghy"), st.integers(0, 300)), max_size=6),
    starts=st.lists(st.tuples(st.sampled_from("abcdefghz"), st.integers(0, 300)), max_size=10),
    tenant=st.sampled_from("abcdefghy"),
    blocks=st.integers(0, 500),
    free=st.integers(0, 1000),
)
def test_what_is_owed_and_allowed(
    pool: int,
    takes: dict[str, TenantKV],
    gave_up: list[tuple[str, int]],
    starts: list[tuple[str, int]],
    tenant: str,
    blocks: int,
    free: int,
) -> None:
    shares = KVShares(pool, 30.0)
    # Requests that gave up at the first refresh's instant count whole in
    # its sample (which stands for the window), as held.
    weights = {name: took.weight for name, took in takes.items()}
    given: dict[str, int] = {}
    for name, lost in gave_up:
        shares.gave_up(name, lost, weight=weights.setdefault(name, 1.0), now=0.0)
        given[name] = given.get(name, 0) + lost
    shares.refresh(takes, now=0.0)
    needs = {name: float(took.held + took.queued) for name, took in takes.items()}
    for name, lost in given.items():
        needs[name] = needs.get(name, 0.0) + lost
    held = {name: took.held for name, took in takes.items()}
    for name, more in starts:
        shares.started(name, more)
        held[name] = held.get(name, 0) + more
    level = shares.level
    if sum(needs.values()) > pool:
        filled = sum(min(need, weights[name] * level) for name, need in needs.items())
        assert filled == pytest.approx(pool, rel=1e-9)
    else:
        assert level == math.inf
    caps = {name: min(need, weights[name] * level) for name, need in needs.items()}
    # Kept as starts come: what a fresh sum over the tenants gives.
    others = sum(max(0.0, cap - held.get(name, 0)) for name, cap in caps.items() if name != tenant)
    assert shares.owed(tenant) == pytest.approx(others, abs=1e-6)
    weight = weights.get(tenant, 1.0)
    allowed = shares.allows(tenant, blocks, weight=weight, free=free)
    mine = held.get(tenant, 0)
    if mine + blocks <= weight * level:
        assert allowed  # within its share: whatever the others are owed
    if others <= 1e-9 and blocks <= free:
        assert allowed  # nobody owed: work-conserving
    if allowed and mine + blocks > weight * level:
        assert free - blocks >= others - 1e-6  # past its share: only unowed room


def test_tenant_kv_takes_its_block_counts_by_keyword() -> None:
    with pytest.raises(TypeError):
        TenantKV(1.0, 2, 3)  # type: ignore[call-arg]


def test_a_refresh_shares_out_the_pool_it_is_told_from_then_on() -> None:
    # Needs 80 and 80: over-asked at 100 blocks (level 50), fitting at 200.
    needs = {name: TenantKV(weight=1.0, held=80, queued=0) for name in ("a", "b")}
    shares = _shares(100, needs)
    assert shares.level == pytest.approx(50.0)
    shares.refresh(needs, now=1.5, pool=200)
    assert shares.level == math.inf
    shares.refresh(needs, now=3.0)  # no pool given: the last one stays
    assert shares.level == math.inf
    for bad in (0, -1, 1.5, True):
        with pytest.raises(UsageError, match="pool"):
            shares.refresh(needs, now=4.5, pool=bad)  # type: ignore[arg-type]
    assert shares.level == math.inf  # refused before anything changed
