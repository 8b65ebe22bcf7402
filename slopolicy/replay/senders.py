"""How a replay sends one request: straight to the engine, or through a Gate.

Both send a streamed legacy completion (``/v1/completions``: the prompt is
counted as made, no chat template adds to it) with ``max_tokens`` the
request's limit and the engine's ``extra_body`` (:meth:`EngineFacts.extra_body
<slopolicy.replay.target.EngineFacts.extra_body>`), and ask for the usage
chunk, whose counts they keep.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from slopolicy.replay.player import Attempt, Refused, Sender, usage_of
from slopolicy.sim.workload import SimRequest

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from slopolicy.adapters.openai import GatedOpenAI

__all__ = ("direct_sender", "gated_sender")


async def _read(stream: Any, attempt: Attempt) -> None:
    """Read ``stream`` to its end into ``attempt``."""
    async for chunk in stream:
        if chunk.choices:
            attempt.chunk(anyio.current_time())
        prompt, output = usage_of(chunk)
        if prompt is not None:
            attempt.prompt_tokens = prompt
        if output is not None:
            attempt.output = output
    attempt.finished = anyio.current_time()


def direct_sender(client: AsyncOpenAI, model: str, extra_body: Mapping[str, Any]) -> Sender:
    """Every request straight to the engine (its own queue orders them)."""
    import openai

    async def send(request: SimRequest, prompt: str, attempt: Attempt) -> None:
        try:
            stream = await client.completions.create(
                model=model, prompt=prompt, max_tokens=request.max_new_tokens, stream=True,
                stream_options={"include_usage": True}, extra_body=dict(extra_body),
                extra_headers={"X-Request-Id": request.id},
            )  # fmt: skip
        except openai.APIStatusError as error:
            after = error.response.headers.get("retry-after")
            seconds = float(after) if after and after.replace(".", "", 1).isdigit() else None
            raise Refused(f"engine_{error.status_code}", error.status_code, seconds) from error
        except openai.APIError as error:
            raise Refused("engine_unreachable", None, None) from error
        attempt.dispatched = anyio.current_time()
        attempt.max_new = request.max_new_tokens
        async with stream:
            await _read(stream, attempt)

    return send


def gated_sender(gated: GatedOpenAI, model: str, extra_body: Mapping[str, Any]) -> Sender:
    """Every request through the gate: tenant, lane hint, tier and the
    recorded prompt length go to the policy (as the simulator gives them)."""

    async def send(request: SimRequest, prompt: str, attempt: Attempt) -> None:
        stream = await gated.completion_stream(
            model=model, prompt=prompt, tenant=request.tenant, lane=request.lane,
            tier=request.tier, prompt_tokens=request.prompt_tokens,
            max_tokens=request.max_new_tokens, stream_options={"include_usage": True},
            extra_body=dict(extra_body),
        )  # fmt: skip
        attempt.dispatched = anyio.current_time()
        sent = stream.request
        attempt.max_new = sent.max_new_tokens
        attempt.model = sent.model if sent.model not in (None, model) else None
        async with stream:
            await _read(stream, attempt)

    return send
