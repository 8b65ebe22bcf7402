"""Streams dropped without ``async with`` or ``aclose()``: released as
cancelled when collected, from a task on their own loop, with the engine's
connection closed; and released once only (the real clients, on asyncio and trio)."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
import pytest

from slopolicy import Outcome, Policy
from slopolicy.adapters import GatedStream
from tests.adapters.clients import HELLO, collected, drain, openai_gate, tgi_gate
from tests.adapters.servers import Recorder, Script
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio

Opener = Callable[[Any], Awaitable[GatedStream[Any]]]


async def _dropped(p: Policy, stream: GatedStream[Any], read: int) -> None:
    """Read ``read`` chunks of ``stream``, then drop it (this holds the last reference)."""
    if read:
        async for _ in stream:
            read -= 1
            if not read:
                break
    assert p.statistics().running == 1
    with pytest.warns(ResourceWarning, match="never closed"):
        del stream  # the last reference: collected at once
    await collected(p)


async def _disconnected(recorder: Recorder, name: str) -> bool:
    hit = recorder.hits[name][0]
    assert await anyio.to_thread.run_sync(hit.done.wait, 5.0)
    return hit.disconnected


@pytest.mark.parametrize("read", [0, 1, 3], ids=["unread", "first-chunk", "some-chunks"])
async def test_a_dropped_openai_stream_is_released_and_disconnected(
    vllm_url: str, recorder: Recorder, read: int
) -> None:
    name = f"dropped-openai-{read}"
    headers = recorder.script(name, Script(tokens=200, tpot=0.02))
    async with openai_gate(vllm_url) as (client, p):
        await _dropped(
            p, await client.chat_stream(model="m", messages=HELLO, extra_headers=headers), read
        )
        assert_clean(p)
        assert p.statistics().outcomes[Outcome.CANCELLED] == 1
        assert await _disconnected(recorder, name)  # while the client is still open


@pytest.mark.parametrize("read", [0, 2], ids=["unread", "some-events"])
async def test_a_dropped_tgi_stream_is_released_and_disconnected(
    tgi_url: str, recorder: Recorder, read: int
) -> None:
    name = f"dropped-tgi-{read}"
    headers = recorder.script(name, Script(tokens=200, tpot=0.02))
    async with tgi_gate(tgi_url, headers) as (client, p):
        await _dropped(p, await client.text_generation_stream("hi", max_new_tokens=200), read)
        assert_clean(p)
        assert p.statistics().outcomes[Outcome.CANCELLED] == 1
        assert await _disconnected(recorder, name)


async def test_a_stream_closed_or_finished_then_dropped_is_released_once(
    vllm_url: str, recorder: Recorder
) -> None:
    headers = recorder.script("closed-then-dropped", Script(tokens=3))
    async with openai_gate(vllm_url) as (client, p):
        finished = await client.chat_stream(model="m", messages=HELLO, extra_headers=headers)
        await drain(finished)
        closed = await client.chat_stream(model="m", messages=HELLO, extra_headers=headers)
        async with closed:
            async for _ in closed:
                break
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del finished, closed
            await collected(p)
        assert not [w for w in caught if "never closed" in str(w.message)]
        assert_clean(p)
        outcomes = p.statistics().outcomes
        assert (outcomes[Outcome.COMPLETED], outcomes[Outcome.CANCELLED]) == (1, 1)
