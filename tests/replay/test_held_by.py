"""A live replay's record of a request the gate expired says what held it, as in the simulator."""

from __future__ import annotations

import pytest

from slopolicy import Hold, Outcome
from slopolicy.errors import Expired
from slopolicy.replay import Plan
from slopolicy.replay.player import Attempt, play
from slopolicy.sim import BEHIND
from slopolicy.sim.records import SimOutcome
from slopolicy.sim.workload import SimRequest, Workload
from tests.core.records import finished

_HELD = {"kv": Hold.KV, "behind": None}


async def _expire(request: SimRequest, prompt: str, attempt: Attempt) -> None:
    """A gate that expires every request, held as its id says (``ok``: served)."""
    if request.id == "ok":
        return
    record = finished(
        0.5,
        ttft=None,
        tpot=None,
        outcome=Outcome.EXPIRED,
        output_tokens=0,
        held_by=_HELD[request.id],
    )
    raise Expired("its deadline passed", record, None)


@pytest.mark.anyio
async def test_expired_records_carry_the_hold_and_a_served_one_none() -> None:
    requests = [SimRequest(name, 0.0, "t", 30, 5, 5) for name in ("kv", "behind", "ok")]
    workload = Workload.of(requests, name="held")
    plan = Plan(workload, {}, {r.id: "the" for r in requests}, drain=5.0)
    run = await play("slopolicy", plan, _expire)
    found = {record.request.id: (record.outcome, record.held_by) for record in run.records}
    assert found == {
        "kv": (SimOutcome.EXPIRED, "kv"),
        "behind": (SimOutcome.EXPIRED, BEHIND),
        "ok": (SimOutcome.COMPLETED, None),
    }
