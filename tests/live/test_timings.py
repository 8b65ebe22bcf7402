"""TTFT and TPOT as the Gate measures them agree with llama-server's own ``timings``.

The server times a request from the moment a slot starts it: ``prompt_ms`` is
the prefill (its end is the first token), ``predicted_per_token_ms`` the time
from the first token to the last over the decode steps between them (the
OpenTelemetry TPOT definition, as the Gate's). The Gate's TTFT counts from
admission, so it adds what lies outside the server's clock: the HTTP round
trip, templating and tokenizing, the SSE write and the client's parse.

Tolerances: TTFT within [server, 1.25 x server + 0.25 s]; TPOT within 20% +
5 ms of the server's. The machine running the tests may be busy (2 shared
CPUs here), so the bounds are relative where the work is.
"""

from __future__ import annotations

from typing import Any

import pytest

from slopolicy import Outcome
from slopolicy.testing.llama.server import LlamaServer
from tests.live.conftest import NO_EOS, chat, gated

pytestmark = pytest.mark.anyio


async def test_ttft_and_tpot_agree_with_the_servers_timings(server: LlamaServer) -> None:
    # About 400 prompt tokens: a prefill long enough to measure against.
    prompt = " ".join(f"item{number}" for number in range(200))
    async with gated(server) as (client, _):
        stream = await client.chat_stream(
            model="tiny",
            messages=chat(prompt),
            max_tokens=16,
            tenant="acme",
            lane="interactive",
            prompt_tokens=400,
            stream_options={"include_usage": True},
            extra_body={**NO_EOS, "cache_prompt": False},
        )
        async with stream:
            chunks = [chunk async for chunk in stream]
    finished = stream.finished
    assert finished is not None
    assert finished.outcome is Outcome.COMPLETED
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == finished.output_tokens == 16
    timings: dict[str, Any] = (chunks[-1].model_extra or {})["timings"]
    assert timings["predicted_n"] == 16
    server_ttft = timings["prompt_ms"] / 1000
    server_tpot = timings["predicted_per_token_ms"] / 1000
    assert finished.ttft is not None
    assert finished.tpot is not None
    assert server_ttft <= finished.ttft <= 1.25 * server_ttft + 0.25, (finished.ttft, timings)
    assert abs(finished.tpot - server_tpot) <= 0.2 * server_tpot + 0.005, (finished.tpot, timings)
