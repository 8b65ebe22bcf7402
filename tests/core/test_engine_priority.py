"""vLLM's ``priority`` for a start: its lane's, and past every lane's for a
start over its tenant's share, so vLLM preempts those first."""

from __future__ import annotations

from slopolicy import Request, Started


def _started(lane: str, *, over_share: bool) -> Started:
    request = Request(id="r", tenant="t", prompt_tokens=10, max_new_tokens=10)
    return Started(
        id="r",
        tenant="t",
        lane=lane,
        request=request,
        kv_blocks=1,
        queue_wait=0.0,
        over_share=over_share,
    )


def test_a_start_within_its_share_gets_its_lane_s_priority() -> None:
    priorities = {"interactive": -10, "heavy": 0, "batch": 10}
    for lane, priority in priorities.items():
        assert _started(lane, over_share=False).engine_priority(priorities) == priority


def test_an_over_share_start_ranks_after_every_start_within_its_share() -> None:
    priorities = {"interactive": -10, "heavy": 0, "batch": 10}
    over = {
        lane: _started(lane, over_share=True).engine_priority(priorities) for lane in priorities
    }
    assert over == {"interactive": 11, "heavy": 21, "batch": 31}  # + (10 - -10 + 1)
    assert min(p for p in over.values() if p is not None) > max(priorities.values())


def test_a_lane_without_a_priority_sends_none_either_way() -> None:
    for over_share in (False, True):
        start = _started("interactive", over_share=over_share)
        assert start.engine_priority({"batch": 10}) is None
    assert _started("batch", over_share=True).engine_priority({}) is None
    # One lane: the span is 1, so an over-share start still ranks after it.
    assert _started("batch", over_share=True).engine_priority({"batch": 10}) == 11
