"""A running cap equal to llama-server's ``-np`` keeps the server's own queue
empty (``llamacpp:requests_deferred`` stays 0), so the order requests run in
is the policy's, not the server's FCFS.

Without the Gate the same burst overflows the slots into that queue: the
contrast shows the watch would have seen it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from slopolicy import Finished, Outcome, Policy
from slopolicy.adapters.llamacpp import LlamaCppReading, LlamaCppScraper
from slopolicy.adapters.openai import GatedOpenAI
from slopolicy.testing.llama.server import LlamaServer
from tests.live.conftest import NO_EOS, SLOTS, chat, config, gated, outcomes, poll
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio


async def watched(
    scraper: LlamaCppScraper, work: Callable[[], Awaitable[None]]
) -> list[LlamaCppReading]:
    """Run ``work`` while scraping the server every 50 ms; the readings."""
    seen: list[LlamaCppReading] = []

    async def watch() -> None:
        while True:
            await scraper()
            if scraper.last is not None:
                seen.append(scraper.last)
            await anyio.sleep(0.05)

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        await work()
        group.cancel_scope.cancel()
    return seen


async def test_direct_requests_beyond_the_slots_wait_in_the_servers_queue(
    server: LlamaServer,
) -> None:
    async def call() -> None:
        await raw.chat.completions.create(
            model="tiny", messages=chat("hi"), max_tokens=16, extra_body=NO_EOS
        )

    async with (
        server.openai_client(max_retries=0) as raw,
        LlamaCppScraper(server.url) as scraper,
        anyio.create_task_group() as group,
    ):
        for _ in range(SLOTS + 2):
            group.start_soon(call)
        await poll(scraper, lambda reading: (reading.waiting or 0) >= 1)


async def wait_until(condition: Callable[[], bool]) -> None:
    """Until the gate's statistics say so: they have no event to wait on."""
    with anyio.fail_after(20):
        while not condition():  # noqa: ASYNC110 - polling the policy's counters
            await anyio.sleep(0.01)


async def test_a_running_cap_of_np_keeps_the_servers_queue_empty(server: LlamaServer) -> None:
    policy = Policy(config())
    records: dict[str, Finished] = {}

    async def call(client: GatedOpenAI, name: str, lane: str) -> None:
        reply = await client.chat(
            model="tiny", messages=chat(f"{name}: hi"), max_tokens=8,
            tenant=name, lane=lane, request_id=name, extra_body=NO_EOS,
        )  # fmt: skip
        records[name] = reply.finished

    async def burst(client: GatedOpenAI) -> None:
        stats = policy.statistics
        async with anyio.create_task_group() as group:
            for number in range(SLOTS):  # fill every slot with batch work
                group.start_soon(call, client, f"first{number}", "batch")
            await wait_until(lambda: stats().running == SLOTS)
            for number in range(2):  # then batch queues first...
                group.start_soon(call, client, f"batch{number}", "batch")
            await wait_until(lambda: stats().queued["batch"] == 2)
            for number in range(2):  # ...and chat after it
                group.start_soon(call, client, f"chat{number}", "interactive")

    async with gated(server, policy) as (client, scraper):
        seen = await watched(scraper, lambda: burst(client))
    assert max(reading.waiting or 0 for reading in seen) == 0
    assert max(reading.running for reading in seen) <= SLOTS
    assert outcomes(policy) == {Outcome.COMPLETED: 2 * SLOTS}
    assert_clean(policy)

    def started(name: str) -> float:
        record = records[name]
        assert record.queue_wait is not None
        return record.arrival + record.queue_wait

    # The chat arrived last and started first: the lanes' order, not arrival order.
    assert max(started(f"chat{n}") for n in range(2)) < min(started(f"batch{n}") for n in range(2))
