from __future__ import annotations

from dataclasses import dataclass

from slopolicy import PolicyConfig
from slopolicy.sim import FCFS, RPM, VTC, LanePriority, SimRequest


@dataclass
class FakeEngine:
    """An engine view that admits ``seats`` requests."""

    seats: int = 0
    running: int = 0
    waiting: int = 0
    free_blocks: int = 0

    def admissible(self, prompt_tokens: int) -> bool:
        return self.seats > 0

    def kv_usage(self) -> float:
        return 0.0

    def decode_tokens(self) -> int:
        return 0


def _request(rid: str, tenant: str = "t", prompt: int = 100, lane: str | None = None) -> SimRequest:
    return SimRequest(rid, 0.0, tenant, prompt, 10, 20, lane)


def test_fcfs_releases_everything_at_once() -> None:
    fcfs = FCFS()
    assert fcfs.submit(_request("a"), 0.0).accepted
    assert fcfs.submit(_request("b"), 0.0).accepted
    released = fcfs.dispatch(0.0, FakeEngine())
    assert [(r.id, r.max_new_tokens, r.priority) for r in released.started] == [
        ("a", 20, 0),
        ("b", 20, 0),
    ]
    assert fcfs.dispatch(0.0, FakeEngine()).started == ()
    assert fcfs.wakeup() is None
    assert fcfs.scheduling == "fcfs"


def test_priority_ranks_requests_by_the_lane_they_route_to() -> None:
    priority = LanePriority(PolicyConfig())
    assert priority.scheduling == "priority"
    for request in (
        _request("chat", prompt=200),
        _request("doc", prompt=50_000),  # demoted to heavy by its prompt budget
        _request("batch", lane="background"),
    ):
        priority.submit(request, 0.0)
    ranks = {r.id: r.priority for r in priority.dispatch(0.0, FakeEngine()).started}
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
    priority.submit(SimRequest("job", 0.0, "t", 100, 10, 20, tier="batch"), 0.0)
    (started,) = priority.dispatch(0.0, FakeEngine()).started
    assert started.priority == 2


def test_vtc_waits_for_room_and_serves_the_smallest_counter_first() -> None:
    vtc = VTC()
    for index in range(3):
        vtc.submit(_request(f"big{index}", "heavy", prompt=1000), 0.0)
    vtc.submit(_request("small0", "light", prompt=10), 0.0)
    assert vtc.dispatch(0.0, FakeEngine(seats=0)).started == ()

    class OneSeat(FakeEngine):
        def admissible(self, prompt_tokens: int) -> bool:
            self.seats -= 1
            return self.seats >= 0

    first = vtc.dispatch(0.0, OneSeat(seats=1)).started
    second = vtc.dispatch(0.0, OneSeat(seats=1)).started
    # heavy was charged 1000 for big0, so light goes next, then heavy again.
    assert [r.id for r in (*first, *second)] == ["big0", "small0"]
    vtc.tokens("big0", 5, 0.1)
    vtc.finish("big0", 1.0, 5)
    assert [r.id for r in vtc.dispatch(1.0, FakeEngine(seats=5)).started] == ["big1", "big2"]


def test_rpm_refuses_above_the_limit_until_the_next_minute() -> None:
    rpm = RPM(limit=2)
    assert rpm.submit(_request("a"), 10.0).accepted
    assert rpm.submit(_request("b"), 20.0).accepted
    refused = rpm.submit(_request("c"), 30.0)
    assert not refused.accepted
    assert (refused.reason, refused.retryable, refused.retry_after) == ("rate_limited", True, 30.0)
    assert rpm.submit(_request("d", tenant="other"), 30.0).accepted
    assert rpm.submit(_request("c"), 60.0).accepted
    assert [r.id for r in rpm.dispatch(60.0, FakeEngine()).started] == ["a", "b", "d", "c"]
