"""Slot pinning for llama-server: the urgent lanes' requests in the lowest free
slot, the others in the highest, ``n`` choices in ``n`` slots, and the pin
on the wire as ``id_slot``."""

from __future__ import annotations

from typing import Any

import pytest

from slopolicy import Gate, Request
from slopolicy.adapters.slots import SlotPinning
from slopolicy.errors import UsageError
from tests.adapters.clients import HELLO, drain
from tests.adapters.clients import openai_gate as gated
from tests.adapters.conftest import policy
from tests.adapters.servers import Recorder, Script

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("slots", "options"),
    [
        (0, {}),
        (True, {}),
        (1.5, {}),
        (10**6, {}),
        (4, {"urgent": "interactive"}),
        (4, {"urgent": [1]}),
    ],
)
def test_bad_settings_are_refused(slots: Any, options: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        SlotPinning(slots, **options)


def _request(name: str, lane: str, n: int = 1) -> Request:
    return Request(id=name, prompt_tokens=10, max_new_tokens=8, lane=lane, n=n)


async def test_chat_takes_the_lowest_free_slot_batch_the_highest() -> None:
    pinning = SlotPinning(4)
    async with Gate(policy(engine={"max_running": 4})) as gate:
        batch = gate.admit_nowait(_request("batch", "batch"))
        chat = gate.admit_nowait(_request("chat", "interactive"))
        assert (pinning.pin(batch), pinning.pin(chat)) == (3, 0)
        wide = gate.admit_nowait(_request("wide", "batch", n=2))
        assert pinning.pin(wide) == 2  # and slot 1, the server's pick for its other choice
        assert pinning.held() == ("chat", "wide", "wide", "batch")
        chat.finish()
        assert pinning.held() == (None, "wide", "wide", "batch")
        late = gate.admit_nowait(_request("late", "interactive"))
        assert pinning.pin(late) == 0  # a released ticket's slot is free again
        for ticket in (batch, wide, late):
            ticket.finish()


async def test_without_enough_free_slots_the_request_goes_unpinned() -> None:
    pinning = SlotPinning(2)  # traffic the gate does not count: it runs 8
    async with Gate(policy(engine={"max_running": 8})) as gate:
        tickets = [gate.admit_nowait(_request(f"r{k}", "interactive")) for k in range(3)]
        assert [pinning.pin(ticket) for ticket in tickets] == [0, 1, None]
        wide = gate.admit_nowait(_request("wide", "interactive", n=2))
        tickets[0].finish()
        assert pinning.pin(wide) is None  # one slot free, two choices
        assert pinning.held() == (None, "r1")
        for ticket in (*tickets[1:], wide):
            ticket.finish()


async def test_the_pin_goes_out_as_id_slot(vllm_url: str, recorder: Recorder) -> None:
    headers = recorder.script("pinned", Script(tokens=2))
    async with gated(vllm_url, slots=SlotPinning(4)) as (client, _):
        stream = await client.chat_stream(
            model="m", messages=HELLO, tenant="acme", lane="batch", extra_headers=headers
        )
        async with stream:
            await drain(stream)
    assert recorder.hit("pinned").body["id_slot"] == 3


async def test_without_pinning_no_id_slot_is_sent(vllm_url: str, recorder: Recorder) -> None:
    headers = recorder.script("unpinned", Script(tokens=2))
    async with gated(vllm_url) as (client, _):
        reply = await client.chat(model="m", messages=HELLO, tenant="acme", extra_headers=headers)
    assert reply.finished.outcome.value == "completed"
    assert "id_slot" not in recorder.hit("unpinned").body


def test_the_adapter_refuses_what_is_not_a_pinning() -> None:
    from openai import AsyncOpenAI

    from slopolicy.adapters.openai import GatedOpenAI

    client = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="-")
    with pytest.raises(UsageError, match="SlotPinning"):
        GatedOpenAI(client, None, slots=4)  # type: ignore[arg-type]
