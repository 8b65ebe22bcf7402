"""A real engine: llama.cpp's ``llama-server`` on the tiny random-weight model,
through the real ``openai`` client and the Gate, on asyncio and trio (real time).

The server comes from :mod:`slopolicy.testing.llama.fixtures`: without a build
(``python -m slopolicy.testing.llama build``) these tests skip and say why;
``.ci/run`` builds it and sets ``SLOPOLICY_REQUIRE_LLAMA`` so they fail instead.
One server serves the modules that leave it running; the fault tests kill
their own.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from slopolicy import Gate, Outcome, Policy, PolicyConfig
from slopolicy.testing.llama.fixtures import REQUIRE_VARIABLE
from slopolicy.testing.llama.fixtures import llama_installation as llama_installation
from slopolicy.testing.llama.fixtures import llama_model as llama_model
from slopolicy.testing.llama.fixtures import llama_server_factory as llama_server_factory
from slopolicy.testing.llama.server import LlamaServer

if os.environ.get(REQUIRE_VARIABLE):
    for package in ("openai", "gguf", "httpx", "prometheus_client"):
        if importlib.util.find_spec(package) is None:
            raise RuntimeError(f"the live tests need {package} ({REQUIRE_VARIABLE} is set)")
pytest.importorskip("openai")
pytest.importorskip("prometheus_client")

from slopolicy.adapters.llamacpp import LlamaCppReading, LlamaCppScraper
from slopolicy.adapters.openai import GatedOpenAI
from slopolicy.adapters.slots import SlotPinning

#: The shared server's shape: 4 slots of 1,024 tokens each.
SLOTS = 4
CONTEXT = 4096
#: Every request ignores EOS, so a random model's stream always runs to max_tokens.
NO_EOS = {"ignore_eos": True}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real time on both backends: the engine is a real process."""
    return str(request.param)


@pytest.fixture(scope="session")
def server(llama_server_factory: Callable[..., LlamaServer]) -> Iterator[LlamaServer]:
    """The shared server (nothing here kills it)."""
    with llama_server_factory(slots=SLOTS, context=CONTEXT) as shared:
        yield shared


def config(slots: int = SLOTS, context: int = CONTEXT, **overrides: Any) -> PolicyConfig:
    """Chat and batch lanes in front of ``slots`` slots: the running cap is the
    server's ``-np``, the KV pool its ``-c``; no ladder (its rungs would change
    what is sent)."""
    data: dict[str, Any] = {
        "lanes": [
            {"name": "interactive", "max_new_tokens": 256, "max_prompt_tokens": 1500, "weight": 8},
            {"name": "batch", "max_new_tokens": 1024, "max_prompt_tokens": 60_000, "weight": 1},
        ],
        "tiers": {"default": {"rate": 1e7, "burst": 1e7, "max_concurrency": 64}},
        "kv": {"num_blocks": context // 16, "block_size": 16},
        "engine": {"max_running": slots},
        "ladder": {"enabled": False},
    }
    data.update(overrides)
    return PolicyConfig.from_dict(data)


@asynccontextmanager
async def gated(
    server: LlamaServer,
    policy: Policy | None = None,
    *,
    slots: SlotPinning | None = None,
    **scraping: Any,
) -> AsyncIterator[tuple[GatedOpenAI, LlamaCppScraper]]:
    """The adapter over a Gate in front of ``server`` (``slots``: pinning its
    requests), and a scraper of it."""
    policy = policy or Policy(config(server.slots, server.context))
    async with (
        LlamaCppScraper(server.url, **scraping) as scraper,
        Gate(policy) as gate,
        server.openai_client(timeout=60.0) as client,
    ):
        yield GatedOpenAI(client, gate, slots=slots), scraper


def chat(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def outcomes(policy: Policy) -> dict[Outcome, int]:
    """How the policy's requests ended, outcomes that happened only."""
    return {outcome: count for outcome, count in policy.statistics().outcomes.items() if count}


async def poll(
    scraper: LlamaCppScraper, done: Callable[[LlamaCppReading], bool]
) -> LlamaCppReading:
    """Scrape until ``done(reading)`` (within 20 s); that reading (polling a real process)."""
    with anyio.fail_after(20):
        while True:
            await scraper()
            reading = scraper.last
            if reading is not None and done(reading):
                return reading
            await anyio.sleep(0.05)
