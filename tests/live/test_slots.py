"""Seats on the real server: ``n`` choices run in ``n`` of llama-server's
slots and the gate counts them so (the server's queue stays empty), and a
request pinned by :class:`~slopolicy.adapters.slots.SlotPinning` runs in the
slot it was given (seen on ``/slots``): chat in the lowest, batch the highest.
"""

from __future__ import annotations

import anyio
import pytest

from slopolicy import Outcome, Policy
from slopolicy.adapters.openai import GatedOpenAI
from slopolicy.adapters.slots import SlotPinning
from slopolicy.testing.llama.server import LlamaServer
from tests.live.conftest import NO_EOS, SLOTS, chat, config, gated, outcomes, poll
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio


async def _read(client: GatedOpenAI, lane: str, n: int = 1, tokens: int = 400) -> None:
    stream = await client.chat_stream(
        model="tiny", messages=chat(f"{lane}: a long story"), max_tokens=tokens,
        tenant=lane, lane=lane, n=n, extra_body=NO_EOS,
    )  # fmt: skip
    async with stream:
        async for _ in stream:
            pass


async def test_pinned_requests_run_in_their_slots(server: LlamaServer) -> None:
    policy = Policy(config())
    async with (
        gated(server, policy, slots=SlotPinning(SLOTS)) as (client, scraper),
        anyio.create_task_group() as group,
    ):
        await poll(scraper, lambda reading: reading.running == 0)
        group.start_soon(_read, client, "batch")
        group.start_soon(_read, client, "interactive")
        both = await poll(scraper, lambda reading: reading.running == 2)
    # The server's least recently used free slot would have been chance.
    assert [slot.id for slot in both.slots if slot.processing] == [0, SLOTS - 1]
    assert outcomes(policy) == {Outcome.COMPLETED: 2}
    assert_clean(policy)


async def test_n_choices_hold_n_seats_and_the_servers_queue_stays_empty(
    server: LlamaServer,
) -> None:
    policy = Policy(config())
    async with gated(server, policy) as (client, scraper), anyio.create_task_group() as group:
        await poll(scraper, lambda reading: reading.running == 0)
        group.start_soon(_read, client, "batch", SLOTS - 1)
        with anyio.fail_after(20):
            while policy.running == 0:  # noqa: ASYNC110 - polling the policy's counters
                await anyio.sleep(0.01)
        group.start_soon(_read, client, "batch")
        group.start_soon(_read, client, "interactive")
        full = await poll(scraper, lambda reading: reading.running == SLOTS)
        # One request of n - 1 choices and one more fill the slots; the third waits here.
        assert policy.running == 2
        assert sum(policy.statistics().queued.values()) == 1
        assert full.waiting == 0
    assert outcomes(policy) == {Outcome.COMPLETED: 3}
    assert_clean(policy)
