"""The real clients behind a gate, as the adapter tests use them."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.lowlevel
from huggingface_hub import AsyncInferenceClient
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from slopolicy import Gate, Policy
from slopolicy.adapters.openai import GatedOpenAI
from slopolicy.adapters.tgi import GatedInferenceClient
from tests.adapters.conftest import policy

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there engine"}]


@asynccontextmanager
async def openai_gate(
    url: str, p: Policy | None = None, **options: Any
) -> AsyncIterator[tuple[GatedOpenAI, Policy]]:
    """``AsyncOpenAI`` against ``url`` behind a gate; ``options`` go to the adapter."""
    p = p or policy()
    client_options = {"timeout": options.pop("timeout", 10.0)}
    async with (
        Gate(p) as gate,
        AsyncOpenAI(base_url=f"{url}/v1", api_key="-", **client_options) as client,
    ):
        yield GatedOpenAI(client, gate, **options), p


@asynccontextmanager
async def tgi_gate(
    url: str, headers: dict[str, str], client_timeout: float = 10.0, p: Policy | None = None
) -> AsyncIterator[tuple[GatedInferenceClient, Policy]]:
    """huggingface_hub's ``AsyncInferenceClient`` against ``url`` behind a gate."""
    p = p or policy()
    async with (
        Gate(p) as gate,
        AsyncInferenceClient(model=url, headers=headers, timeout=client_timeout) as client,
    ):
        yield GatedInferenceClient(client, gate), p


async def drain(stream: AsyncIterator[Any]) -> list[Any]:
    return [chunk async for chunk in stream]


async def collected(p: Policy) -> None:
    """Collect garbage, then let the loop run the clean-up it started (a
    bounded number of checkpoints: the release takes a few loop turns)."""
    gc.collect()
    for _ in range(100):
        if p.statistics().running == 0:
            break
        await anyio.lowlevel.checkpoint()
