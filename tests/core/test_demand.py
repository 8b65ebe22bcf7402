"""TenantDemand: who asks for more than its max-min share of what is served."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from slopolicy import PolicyConfig
from slopolicy.core.queueing.demand import TenantDemand
from slopolicy.errors import UsageError


def test_nobody_is_over_while_the_engine_keeps_up() -> None:
    demand = TenantDemand(10.0)
    for t in range(100):
        demand.served(100.0, now=t)  # what was asked a moment before, started
        assert not demand.offered("big", cost=90.0, weight=1.0, now=t)
        assert not demand.offered("small", cost=10.0, weight=1.0, now=t)
    assert demand.level(now=100.0) == math.inf
    assert not demand.over("big", now=100.0)


def test_under_saturation_only_the_tenant_above_the_level_is_over() -> None:
    # Served 60 of 100 asked each second: small (10) keeps all of it, the
    # level is what is left split between the two others by weight.
    demand = TenantDemand(10.0)
    for t in range(200):
        demand.offered("small", cost=10.0, weight=1.0, now=t)
        demand.offered("mid", cost=30.0, weight=1.0, now=t)
        demand.offered("big", cost=60.0, weight=2.0, now=t)
        demand.served(60.0, now=t)
    now = 200.0
    level = demand.level(now=now)
    assert not demand.over("small", now=now)
    assert demand.over("mid", now=now)  # 30 > 1 * level
    assert demand.over("big", now=now)  # 60 > 2 * level
    # Small's 10 met in full, the 50 left split over weights 1 + 2: a level
    # of 50/3 per second, in the decayed sums' units (served stands for 60).
    assert level / demand.started(now=now) == pytest.approx((50.0 / 3.0) / 60.0)


def _light_pushes_read_as_over(window: float) -> int:
    """A light tenant sends a turn of two long requests (20 units each, 1 s
    apart) every 20 s, 2 units a second in the long run, beside a flood of
    10 a second; 6 a second is served, so its max-min share (up to 4 a
    second) holds all it asks in the long run. How many of its pushes after
    the first minute read as over."""
    demand = TenantDemand(window)
    over = 0
    for tick in range(1200):  # 0.1 s apart, two minutes
        now = tick / 10
        demand.offered("flood", cost=1.0, weight=1.0, now=now)
        demand.served(0.6, now=now)
        if tick % 200 in (0, 10):
            pushed_over = demand.offered("light", cost=20.0, weight=1.0, now=now)
            over += now >= 60 and pushed_over
    return over


def test_the_default_window_holds_more_than_a_light_tenant_s_latest_request() -> None:
    # Over 10 s the light tenant's demand is mostly its latest turn: the
    # second request of each turn reads as over a share it keeps in the
    # long run (3 of its 6 pushes in the second minute).
    assert _light_pushes_read_as_over(10.0) == 3
    window = PolicyConfig().engine.share_window_s
    assert window is not None
    assert _light_pushes_read_as_over(window) == 0


@given(
    rates=st.dictionaries(
        st.sampled_from("abcdef"),
        st.tuples(st.floats(0.5, 100.0), st.sampled_from([0.5, 1.0, 2.0])),
        min_size=1,
    ),
    served=st.floats(1.0, 300.0),
)
def test_the_level_shares_out_exactly_what_was_served(
    rates: dict[str, tuple[float, float]], served: float
) -> None:
    # Everything offered and served at one instant, read a refresh later
    # (the level is recomputed every window/20): every sum decayed alike.
    demand = TenantDemand(10.0)
    for tenant, (rate, weight) in rates.items():
        demand.offered(tenant, cost=rate, weight=weight, now=1.0)
    demand.served(served, now=1.0)
    now, f = 1.5, math.exp(-0.05)
    level = demand.level(now=now)
    total = sum(rate for rate, _ in rates.values())
    if total <= served:
        assert level == math.inf
        assert not any(demand.over(t, now=now) for t in rates)
        assert demand.within_share(now=now) == frozenset()  # nobody to protect
        return
    shares = sum(min(f * rate, weight * level) for rate, weight in rates.values())
    assert shares == pytest.approx(f * served, rel=1e-9)
    for tenant, (rate, weight) in rates.items():
        if not math.isclose(f * rate, weight * level, rel_tol=1e-9):  # a tie rounds either way
            assert demand.over(tenant, now=now) == (f * rate > weight * level)
    # The set the KV shares protect: the others, tenant by tenant.
    assert demand.within_share(now=now) == {t for t in rates if not demand.over(t, now=now)}
    # Max-min: the smallest demand per weight is never over unless all are.
    smallest = min(rates, key=lambda t: rates[t][0] / rates[t][1])
    if demand.over(smallest, now=now):
        assert all(demand.over(t, now=now) for t in rates)


def _water_level(demands: dict[str, tuple[float, float]], served: float) -> float:
    """Max-min water-filling, the textbook way: in order of demand per weight."""
    left, weights = served, sum(weight for _, weight in demands.values())
    for demand, weight in sorted(demands.values(), key=lambda dw: dw[0] / dw[1]):
        if demand * weights >= left * weight:
            return left / weights
        left -= demand
        weights -= weight
    return math.inf


@pytest.mark.parametrize("passes", [0, 1, 2, 16])
@given(
    demands=st.dictionaries(
        st.text("abcdefgh", min_size=1, max_size=3),
        st.tuples(st.floats(0.01, 1e6), st.sampled_from([0.5, 1.0, 2.0, 3.0])),
        min_size=1,
        max_size=60,
    ),
    fraction=st.floats(0.01, 0.99),
)
def test_the_level_is_the_water_level_however_many_passes_it_takes(
    passes: int, demands: dict[str, tuple[float, float]], fraction: float
) -> None:
    # Progressive filling, cut short after any number of passes and sorted
    # from there, lands where the textbook water-filling does.
    total = sum(demand for demand, _ in demands.values())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("slopolicy.core.queueing.demand._PASSES", passes)
        demand = TenantDemand(10.0)
        for tenant, (cost, weight) in demands.items():
            demand.offered(tenant, cost=cost, weight=weight, now=0.0)
        demand.served(fraction * total, now=0.0)
        level = demand.level(now=1.0)  # a refresh later: every sum decayed alike
    f = math.exp(-0.1)
    expected = _water_level({t: (f * d, w) for t, (d, w) in demands.items()}, f * fraction * total)
    assert level == pytest.approx(expected, rel=1e-9)
    # Protection: some tenant's demand is met in full (below the level).
    below = [f * d / w < level * (1 - 1e-9) for d, w in demands.values()]
    ties = [math.isclose(f * d / w, level, rel_tol=1e-9) for d, w in demands.values()]
    if level < math.inf and not any(ties):
        assert demand.protects(now=1.0) == any(below)
    # The part of each tenant's demand within its share: all of it below the
    # level, the level's worth above it.
    for tenant, (cost, weight) in demands.items():
        expected_part = min(1.0, level * weight / (f * cost))
        assert demand.portion(tenant, now=1.0) == pytest.approx(expected_part, rel=1e-9)
    assert demand.portion("unknown", now=1.0) == 1.0


def test_demand_decays_and_idle_tenants_are_forgotten() -> None:
    demand = TenantDemand(1.0)
    demand.offered("a", cost=5.0, weight=1.0, now=0.0)
    demand.served(1.0, now=0.0)
    assert demand.over("a", now=0.1)  # a refresh later (window / 20)
    assert demand.level(now=100.0) == math.inf  # both decayed to nothing
    assert not demand.over("a", now=100.0)
    assert "a" not in demand._demand


def test_an_extra_read_does_not_move_later_recomputations() -> None:
    # Refresh 0.5 s. The level is recomputed at the first read past each
    # multiple of it: a read at 0.55 (B only) recomputes early in the second
    # interval but moves no later one, so both recompute at 1.1 from the same
    # sums. (Counting the refresh from the last read, B's 0.55 would have put
    # A's 1.1 and B's 1.1 in different intervals: A at 1.2, B at 1.05.)
    def run(reads: list[float]) -> list[float]:
        demand = TenantDemand(10.0)
        demand.offered("a", cost=30.0, weight=1.0, now=0.0)
        demand.offered("b", cost=10.0, weight=1.0, now=0.0)
        demand.served(20.0, now=0.0)
        levels = []
        for at in reads:
            if at == 0.9:  # served more after the second interval's first read
                demand.served(5.0, now=at)
            levels.append(demand.level(now=at))
        return levels

    a = run([0.0, 0.7, 0.9, 1.1])
    b = run([0.0, 0.55, 0.7, 0.9, 1.1])
    assert a[-1] == b[-1]
    assert a[-1] > a[-2]  # recomputed at 1.1 (the serve at 0.9 raised it)
    assert a[1] == a[2]  # 0.7 and 0.9 are in one interval: no recomputation between


def test_sums_stay_exact_across_epochs() -> None:
    # 1,000 s of a 10 s window: the sums move to a new epoch every 400 s,
    # and every reading matches the decayed sums computed directly.
    demand, window = TenantDemand(10.0), 10.0
    offers: list[tuple[str, float, float]] = []
    starts: list[tuple[float, float]] = []
    for step in range(2000):
        now = step * 0.5
        for tenant, cost in (("a", 3.0), ("b", 7.0 + step % 5)):
            demand.offered(tenant, cost=cost, weight=1.0, now=now)
            offers.append((tenant, cost, now))
        demand.served(6.0, now=now)
        starts.append((6.0, now))
    now = 1000.0
    assert demand._epoch is not None
    assert demand._epoch > 800.0  # moved twice

    def decayed(items: list[tuple[float, float]]) -> float:
        return sum(cost * math.exp(-(now - at) / window) for cost, at in items)

    for tenant in ("a", "b"):
        asked = decayed([(cost, at) for t, cost, at in offers if t == tenant])
        assert demand.asked(tenant, now=now) == pytest.approx(asked, rel=1e-9)
    served = decayed(starts)
    assert demand.started(now=now) == pytest.approx(served, rel=1e-9)
    # a's demand (~3/0.5 s) is met; b gets what is left.
    assert demand.level(now=now) == pytest.approx(served - demand.asked("a", now=now), rel=1e-9)
    assert not demand.over("a", now=now)
    assert demand.over("b", now=now)


def test_a_clock_that_went_back_reads_as_the_epoch() -> None:
    # Far behind the epoch a cost would decay to nothing and a reading
    # would divide by 0; earlier times count as the epoch instead.
    demand = TenantDemand(1.0)
    demand.offered("a", cost=5.0, weight=1.0, now=1000.0)
    demand.served(1.0, now=1000.0)
    assert demand.asked("a", now=0.0) == pytest.approx(5.0)
    assert demand.started(now=0.0) == pytest.approx(1.0)
    demand.offered("a", cost=1.0, weight=1.0, now=-1e6)  # counted at the epoch
    assert demand.asked("a", now=1000.0) == pytest.approx(6.0)


def _sums(demand: TenantDemand) -> object:
    """Everything ``demand`` keeps, as plain values."""
    kept = {t: (k.demand, k.weight, k.carry, k.spared) for t, k in demand._demand.items()}
    return kept, demand._served


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda d: d.offered("a", cost=-1.0, weight=1.0, now=0.0), "cost must be >= 0"),
        (
            lambda d: d.offered("a", cost=math.nan, weight=1.0, now=0.0),
            "cost must be a finite number",
        ),
        (lambda d: d.offered("a", cost=1.0, weight=0.0, now=0.0), "weight must be finite and > 0"),
        (lambda d: d.offered("a", cost=1.0, weight=1.0, now=math.inf), "now must be"),
        (lambda d: d.served(-2.0, now=0.0), "cost must be >= 0"),
        (lambda d: d.served(1.0, now=math.nan), "now must be"),
        (lambda d: d.over("a", now=-math.inf), "now must be"),
        (lambda d: d.within_share(now=math.nan), "now must be"),
        (lambda d: d.sheds("a", cost=-1.0, weight=1.0, now=0.0), "cost must be >= 0"),
        (lambda d: d.sheds("a", cost=1.0, weight=-1.0, now=0.0), "weight must be finite and > 0"),
        (lambda d: d.sheds("a", cost=1.0, weight=1.0, now=math.nan), "now must be"),
        (lambda d: d.offered("a", cost=1.0, weight=1.0, now=0.0, spared=1), "spared must be"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(call: object, match: str) -> None:
    demand = TenantDemand(5.0)
    demand.offered("a", cost=1.0, weight=1.0, now=0.0)
    before = _sums(demand)
    with pytest.raises(UsageError, match=match):
        call(demand)  # type: ignore[operator]
    assert _sums(demand) == before


@pytest.mark.parametrize("window", [0.0, -1.0, math.inf, math.nan, 5e-324, 1e-4])
def test_a_bad_window_is_refused(window: float) -> None:
    with pytest.raises(UsageError, match="window_s"):
        TenantDemand(window)


class DemandMachine(RuleBasedStateMachine):
    """Tenants queue work and the engine starts some, at times that only move
    forward; whenever the level is recomputed it shares out exactly what was
    served (decayed), and a tenant is over iff above its weighted level."""

    def __init__(self) -> None:
        super().__init__()
        self.demand = TenantDemand(10.0)
        self.now = 0.0
        self.weights: dict[str, float] = {}

    @rule(
        tenant=st.sampled_from("abcd"),
        cost=st.floats(0.0, 500.0),
        weight=st.sampled_from([0.5, 1.0, 3.0]),
        step=st.floats(0.0, 2.0),
        spared=st.booleans(),
    )
    def offer(self, tenant: str, cost: float, weight: float, step: float, spared: bool) -> None:
        self.now += step
        self.weights[tenant] = weight
        self.demand.offered(tenant, cost=cost, weight=weight, now=self.now, spared=spared)

    @rule(cost=st.floats(0.0, 800.0), step=st.floats(0.0, 2.0))
    def serve(self, cost: float, step: float) -> None:
        self.now += step
        self.demand.served(cost, now=self.now)

    @rule(
        tenant=st.sampled_from("abcd"),
        cost=st.floats(0.0, 500.0),
        weight=st.sampled_from([0.5, 1.0, 3.0]),
        step=st.floats(0.0, 2.0),
    )
    def shed(self, tenant: str, cost: float, weight: float, step: float) -> None:
        self.now += step
        demand = self.demand
        level = demand.level(now=self.now)  # (a refresh is due no sooner in sheds)
        before = demand.asked(tenant, now=self.now)
        within = before <= weight * level
        self.weights.setdefault(tenant, weight)
        refused = demand.sheds(tenant, cost=cost, weight=weight, now=self.now)
        if within:
            assert not refused  # a tenant within its share is never shed
        after = demand.asked(tenant, now=self.now)
        # A refused request counts as demand; one let through is counted when it queues.
        assert after == pytest.approx(before + (cost if refused else 0.0), rel=1e-9, abs=1e-9)
        if refused:
            self.weights[tenant] = weight

    @invariant()
    def carries_stay_below_one_request_and_the_spared_part_within_the_demand(self) -> None:
        for kept in self.demand._demand.values():
            assert 0.0 <= kept.carry < 1.0
            assert 0.0 <= kept.spared <= kept.demand * (1 + 1e-9)

    @invariant()
    def the_level_shares_out_what_was_served(self) -> None:
        demand = self.demand
        self.now += 0.6  # past a refresh (0.5 s): recomputed from the sums now
        level = demand.level(now=self.now)
        kept = {
            tenant: (demand.asked(tenant, now=self.now), kept.weight)
            for tenant, kept in demand._demand.items()
        }
        served = demand.started(now=self.now)
        total = sum(value for value, _ in kept.values())
        if level == math.inf:
            assert total <= served or served <= 0
        else:
            shares = sum(min(value, weight * level) for value, weight in kept.values())
            assert shares == pytest.approx(served, rel=1e-6, abs=1e-9)
        for tenant, (value, weight) in kept.items():
            if not math.isclose(value, weight * level, rel_tol=1e-9):  # a tie rounds either way
                assert demand.over(tenant, now=self.now) == (value > weight * level)
        assert set(demand._demand) <= set(self.weights)


TestDemandMachine = DemandMachine.TestCase


def test_shedding_takes_from_each_tenant_what_its_share_leaves() -> None:
    # 100 served; a asks 20 (met in full), b asks 200 and gets the other 80:
    # shedding refuses 1 - 80/200 = 60% of b's requests, evenly, none of a's.
    demand = TenantDemand(20.0)  # the level is recomputed every second
    demand.offered("a", cost=20.0, weight=1.0, now=0.0)
    demand.offered("b", cost=200.0, weight=1.0, now=0.0)
    demand.served(100.0, now=0.0)
    assert demand.level(now=1.0) == pytest.approx(80.0 * math.exp(-1 / 20))
    a = [demand.sheds("a", cost=0.0, weight=1.0, now=1.0) for _ in range(50)]
    b = [demand.sheds("b", cost=0.0, weight=1.0, now=1.0) for _ in range(50)]
    assert not any(a)
    assert sum(b) in (29, 30)  # 50 times 0.6, to float rounding
    assert all(sum(b[i : i + 5]) in (2, 3, 4) for i in range(0, 50, 5))  # spread, not a burst
    assert not demand.sheds("new", cost=5.0, weight=1.0, now=1.0)  # asked nothing yet
    assert demand.asked("new", now=1.0) == 0.0  # counted when it queues, not here


def test_shedding_takes_a_tenants_excess_from_the_work_it_may_refuse() -> None:
    # b asks 200, 50 of it in a lane shedding spares: its excess of 120 over
    # its share of 80 comes out of the other 150, so 80% of what it may lose.
    demand = TenantDemand(20.0)
    demand.offered("a", cost=20.0, weight=1.0, now=0.0)
    demand.offered("b", cost=150.0, weight=1.0, now=0.0)
    demand.offered("b", cost=50.0, weight=1.0, now=0.0, spared=True)
    demand.served(100.0, now=0.0)
    b = [demand.sheds("b", cost=0.0, weight=1.0, now=1.0) for _ in range(50)]
    assert sum(b) in (39, 40)
    # c's spared work alone is over its share: every request it may lose is shed.
    demand.offered("c", cost=500.0, weight=1.0, now=1.0, spared=True)
    assert all(demand.sheds("c", cost=0.0, weight=1.0, now=2.0) for _ in range(5))


def test_a_shed_request_counts_as_demand_and_a_tenant_back_within_its_share_starts_clean() -> None:
    demand = TenantDemand(20.0)
    demand.offered("b", cost=200.0, weight=1.0, now=0.0)
    demand.served(100.0, now=0.0)
    assert not demand.sheds("b", cost=7.0, weight=1.0, now=1.0)  # carry 0.5
    assert demand.sheds("b", cost=7.0, weight=1.0, now=1.0)  # carry 1.0: refused
    assert demand.asked("b", now=1.0) == pytest.approx(200.0 * math.exp(-1 / 20) + 7.0)
    demand.served(1000.0, now=2.0)  # at the next refresh the engine serves all it asks
    assert not demand.sheds("b", cost=7.0, weight=1.0, now=3.0)
    assert demand._demand["b"].carry == 0.0
