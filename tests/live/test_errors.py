"""llama-server's own refusals, as the OpenAI adapter maps them.

- A prompt longer than a slot's context (``-c / -np`` tokens) is answered
  ``400 {"error": {"type": "exceed_context_size_error", "n_prompt_tokens": ...,
  "n_ctx": ...}}``, before the stream too (llama.cpp sends a stream's first
  error as a plain answer): ``prompt_too_long``, the ticket ``cancelled``.
- ``n`` beyond the slots: ``400 invalid_request_error``: ``invalid_request``.
- A prompt that fits with too little room for ``max_tokens`` is not refused
  (vLLM would refuse it): the output stops where the context ends,
  ``finish_reason: "length"``, and the usage charges what was decoded.
"""

from __future__ import annotations

import pytest

from slopolicy import Outcome, Policy
from slopolicy.adapters import EngineError, EngineFault
from slopolicy.testing.llama.server import LlamaServer
from tests.live.conftest import NO_EOS, SLOTS, chat, config, gated, outcomes
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio


def words(count: int) -> str:
    """About ``count`` tokens (" word" is one token of Llama 3's; the chat
    template adds about ten)."""
    return "word " * count


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "stream"])
async def test_a_prompt_longer_than_a_slot_is_prompt_too_long(
    server: LlamaServer, streamed: bool
) -> None:
    policy = Policy(config())
    async with gated(server, policy) as (client, _):
        call = client.chat_stream if streamed else client.chat
        with pytest.raises(EngineError) as caught:
            await call(model="tiny", messages=chat(words(server.slot_context)), lane="batch")
    error = caught.value
    assert error.fault is EngineFault.PROMPT_TOO_LONG
    assert (error.engine_status, error.http_status) == (400, 413)
    assert f"({server.slot_context} tokens)" in error.message
    assert outcomes(policy) == {Outcome.CANCELLED: 1}
    assert_clean(policy)


async def test_more_choices_than_slots_is_an_invalid_request(server: LlamaServer) -> None:
    policy = Policy(config())
    async with gated(server, policy) as (client, _):
        with pytest.raises(EngineError) as caught:
            await client.chat(model="tiny", messages=chat("hi"), n=SLOTS + 1, max_tokens=4)
    assert caught.value.fault is EngineFault.INVALID_REQUEST
    assert "'n'" in caught.value.message
    assert outcomes(policy) == {Outcome.CANCELLED: 1}
    assert_clean(policy)


async def test_an_output_past_the_context_stops_at_its_end(server: LlamaServer) -> None:
    policy = Policy(config())
    async with gated(server, policy) as (client, _):
        stream = await client.chat_stream(
            model="tiny", messages=chat(words(server.slot_context - 30)), max_tokens=1000,
            lane="batch", extra_body={**NO_EOS, "cache_prompt": False},
        )  # fmt: skip
        async with stream:
            chunks = [chunk async for chunk in stream]
    finished = stream.finished
    assert finished is not None
    assert finished.outcome is Outcome.COMPLETED
    assert chunks[-1].choices[0].finish_reason == "length"
    assert 0 < finished.output_tokens < 30
    assert_clean(policy)
