"""Reclaim on the real server: a tenant over its share holds the policy's KV
pool with one long answer when another tenant's chat turn arrives; the policy
revokes the long answer, its stream raises :class:`~slopolicy.Revoked`,
llama-server stops decoding it (its slot goes idle, far short of the tokens
asked for), and the chat turn is served in the room it freed, long before the
long answer would have ended.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from slopolicy import Outcome, Policy, PolicyConfig, Revoked
from slopolicy.testing.llama.server import LlamaServer
from tests.live.conftest import NO_EOS, chat, gated, outcomes, poll
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio

#: The long answer: its prompt as the policy counts it, and the tokens it asks for.
LONG_PROMPT, LONG_ANSWER = 6000, 1300
#: The policy's pool: 460 blocks of 16 tokens, so the long request reserves
#: all but 3 (457) and holds 375 from its first token on. The other tenant's
#: turn reserves 52: neither the forecast peak (the long answer grows to its
#: end while the turn runs) nor 80% of the pool as held now (the cold start's
#: fill) has room for it, so only a revocation makes room.
BLOCKS = 460
#: The other tenant's turn: its prompt (as counted) and answer.
CHAT_PROMPT, CHAT_ANSWER = 32, 800


@pytest.fixture(scope="module")
def roomy(llama_server_factory: Callable[..., LlamaServer]) -> Iterator[LlamaServer]:
    """Two slots of 8,192 tokens: room for the long prompt and its answer."""
    with llama_server_factory(slots=2, context=16_384) as server:
        yield server


def _config() -> PolicyConfig:
    """One chat lane with a 10 s TTFT target over two seats and :data:`BLOCKS`;
    the ladder's tick each second is what dispatches while nothing else
    happens (the demand estimate refreshes every 1.5 s)."""
    data: dict[str, Any] = {
        "lanes": [
            {
                "name": "interactive",
                "max_new_tokens": 1500,
                "max_prompt_tokens": 7000,
                "slo": {"ttft_p95_s": 10.0},
            }
        ],
        "tiers": {"default": {"rate": 1e7, "burst": 1e7, "max_concurrency": 64}},
        "kv": {"num_blocks": BLOCKS, "block_size": 16},
        "engine": {"max_running": 2},
    }
    return PolicyConfig.from_dict(data)


async def test_a_revoked_stream_stops_on_the_server_and_the_chat_turn_is_served(
    roomy: LlamaServer,
) -> None:
    policy = Policy(_config())
    revoked: list[Revoked] = []
    streamed = 0
    async with gated(roomy, policy) as (client, scraper), anyio.create_task_group() as group:
        before = await poll(scraper, lambda reading: reading.running == 0)

        async def long_answer() -> None:
            nonlocal streamed
            stream = await client.chat_stream(
                model="tiny", messages=chat("hello " * 5000), max_tokens=LONG_ANSWER,
                tenant="bulk", lane="interactive", prompt_tokens=LONG_PROMPT,
                extra_body={**NO_EOS, "cache_prompt": False},
            )  # fmt: skip
            try:
                async with stream:
                    async for _ in stream:
                        streamed += 1
            except Revoked as error:
                revoked.append(error)

        group.start_soon(long_answer)
        with anyio.fail_after(20):
            while streamed < 2:  # noqa: ASYNC110 - waiting on the stream's own count
                await anyio.sleep(0.01)
        asked = anyio.current_time()
        chat_stream = await client.chat_stream(
            model="tiny", messages=chat("a quick question"), max_tokens=CHAT_ANSWER,
            tenant="chat", lane="interactive", prompt_tokens=CHAT_PROMPT, extra_body=NO_EOS,
        )  # fmt: skip
        admitted = anyio.current_time() - asked
        async with chat_stream:
            chunks = [chunk async for chunk in chat_stream]
        after = await poll(scraper, lambda reading: reading.running == 0)
    assert len(revoked) == 1
    (error,) = revoked
    assert error.finished.outcome is Outcome.REVOKED
    assert error.finished.tenant == "bulk"
    # The turn was admitted at a tick once the demand counted it (1.2-2.1 s
    # in four runs), not after the long answer's 1,300 tokens (13 s alone).
    assert admitted < 6.0
    assert streamed < LONG_ANSWER // 2
    assert chat_stream.finished is not None
    assert chat_stream.finished.outcome is Outcome.COMPLETED
    assert chat_stream.finished.output_tokens == CHAT_ANSWER
    assert chunks
    # The server stopped decoding the revoked answer: of both requests it
    # decoded the chat turn's tokens and about what the long one streamed.
    assert before.predicted_total is not None
    assert after.predicted_total is not None
    decoded = after.predicted_total - before.predicted_total
    assert CHAT_ANSWER <= decoded < CHAT_ANSWER + LONG_ANSWER // 2, decoded
    assert outcomes(policy) == {Outcome.REVOKED: 1, Outcome.COMPLETED: 1}
    assert_clean(policy)
