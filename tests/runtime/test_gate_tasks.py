"""Agent tasks through the Gate: a lost task's next turn is refused with its reason and status."""

from __future__ import annotations

import anyio
import pytest

from slopolicy import Gate, Policy, PolicyConfig, Rejected, Request, TaskRef
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.runtime.http import error_response

pytestmark = pytest.mark.anyio


def _gate() -> Gate:
    config = PolicyConfig.from_dict(
        {"lanes": [{"name": "agent", "slo_deadline": False, "task": {"deadline_s": 10}}]}
    )
    return Gate(Policy(config, counter=HeuristicCounter()))


async def test_the_turn_after_the_deadline_is_refused_408_and_the_task_fails() -> None:
    async with _gate() as gate:
        async with gate.admit(Request(tenant="a", prompt_tokens=5, task=TaskRef("t", 0))):
            pass
        await anyio.sleep(11.0)  # a long tool call (virtual time)
        with pytest.raises(Rejected) as raised:
            await gate.admit(Request(tenant="a", prompt_tokens=5, task=TaskRef("t", 1)))
        assert raised.value.code == "task_deadline_lost"
        assert raised.value.http_status == 408
        assert error_response(raised.value)[0] == 408
        assert gate.policy.tasks.statistics().failed == 1
