from __future__ import annotations

from slopolicy import PolicyConfig
from slopolicy.sim import (
    FCFS,
    RPM,
    VTC,
    EngineSpec,
    EngineView,
    LanePriority,
    Scheduler,
    SimRequest,
    Workload,
    profile,
    simulate,
)
from tests.sim.harness import engine_view, sim_request, started_ids

H100 = profile("llama3-8b/h100")


def _view(seats: int = 256, blocks: int | None = None) -> EngineView:
    return engine_view(seats, blocks)[1]


def test_fcfs_releases_everything_at_once() -> None:
    fcfs = FCFS()
    assert fcfs.submit(sim_request("a"), now=0.0).accepted
    assert fcfs.submit(sim_request("b"), now=0.0).accepted
    released = fcfs.dispatch(0.0, _view())
    assert [(r.id, r.max_new_tokens, r.priority) for r in released.started] == [
        ("a", 20, 0),
        ("b", 20, 0),
    ]
    assert fcfs.dispatch(0.0, _view()).started == ()
    assert fcfs.wakeup() is None
    assert fcfs.scheduling == "fcfs"


def test_priority_ranks_requests_by_the_lane_they_route_to() -> None:
    priority = LanePriority(PolicyConfig())
    assert priority.scheduling == "priority"
    for request in (
        sim_request("chat", prompt=200),
        sim_request("doc", prompt=50_000),  # demoted to heavy by its prompt budget
        sim_request("batch", lane="background"),
    ):
        priority.submit(request, now=0.0)
    ranks = {r.id: r.priority for r in priority.dispatch(0.0, _view()).started}
    assert ranks == {"chat": 0, "doc": 1, "batch": 2}


def test_a_tier_hint_routes_as_the_policy_would() -> None:
    config = PolicyConfig.from_dict(
        {
            "tiers": {
                "default": {},
                "batch": {"default_lane": "background", "allowed_lanes": ["background"]},
            }
        }
    )
    priority = LanePriority(config)
    priority.submit(SimRequest("job", 0.0, "t", 100, 10, 20, tier="batch"), now=0.0)
    (started,) = priority.dispatch(0.0, _view()).started
    assert started.priority == 2


def test_vtc_starts_only_what_the_engines_seats_take_in_one_dispatch() -> None:
    vtc = VTC()
    for index in range(10):
        vtc.submit(sim_request(f"r{index}"), now=0.0)
    view = _view(seats=3)
    assert len(vtc.dispatch(0.0, view).started) == 3  # the view counts each as it goes
    assert vtc.dispatch(0.0, view).started == ()  # still unsettled: the seats are taken


def test_vtc_waits_for_room_and_serves_the_smallest_counter_first() -> None:
    vtc = VTC()
    for index in range(3):
        vtc.submit(sim_request(f"big{index}", "heavy", prompt=1000), now=0.0)
    vtc.submit(sim_request("small0", "light", prompt=10), now=0.0)
    assert vtc.dispatch(0.0, _view(seats=1, blocks=10)).started == ()  # no KV for 1,000
    first = vtc.dispatch(0.0, _view(seats=1)).started
    second = vtc.dispatch(0.0, _view(seats=1)).started
    # heavy was charged 1000 for big0, so light goes next, then heavy again.
    assert [r.id for r in (*first, *second)] == ["big0", "small0"]
    vtc.tokens("big0", 5, now=0.1)
    vtc.finish("big0", now=1.0, output_tokens=5)
    assert started_ids(vtc.dispatch(1.0, _view(seats=5))) == ["big1", "big2"]


def _served_share(scheduler: Scheduler, tenant: str, by: float) -> float:
    """The share of requests started by ``by`` seconds that ``tenant`` sent,
    with ``busy`` sending four times as many as ``quiet``, both overloading an
    engine of 8 seats."""
    requests = [
        SimRequest(f"{name}{i}", i / rate, name, 500, 100, 100)
        for name, rate, count in (("busy", 40.0, 400), ("quiet", 10.0, 100))
        for i in range(count)
    ]
    result = simulate(Workload.of(requests), scheduler, EngineSpec(H100, max_num_seqs=8))
    started = [r for r in result.records if r.first_token_at is not None and r.first_token_at <= by]
    return sum(r.request.tenant == tenant for r in started) / len(started)


def test_vtc_gives_two_backlogged_tenants_equal_shares_where_fcfs_follows_their_rates() -> None:
    assert _served_share(FCFS(), "quiet", by=8.0) < 0.3  # about its 20% of arrivals
    assert _served_share(VTC(), "quiet", by=8.0) > 0.42  # about half: equal tokens


def test_rpm_refuses_above_the_limit_until_the_next_minute() -> None:
    rpm = RPM(limit=2)
    assert rpm.submit(sim_request("a"), now=10.0).accepted
    assert rpm.submit(sim_request("b"), now=20.0).accepted
    refused = rpm.submit(sim_request("c"), now=30.0)
    assert not refused.accepted
    assert (refused.reason, refused.retryable, refused.retry_after) == ("rate_limited", True, 30.0)
    assert rpm.submit(sim_request("d", tenant="other"), now=30.0).accepted
    assert rpm.submit(sim_request("c"), now=60.0).accepted
    assert started_ids(rpm.dispatch(60.0, _view())) == ["a", "b", "d", "c"]
