"""Stopping a stream mid-way frees llama-server's slot (seen on ``/slots``) and
ends the ticket exactly once, as ``cancelled``.

llama-server notices a closed connection at its next token and releases the
slot; its ``tokens_predicted_total`` then counts only what was decoded, far
short of the ``max_tokens`` asked for.
"""

from __future__ import annotations

import anyio
import pytest

from slopolicy import Outcome, Policy
from slopolicy.testing.llama.server import LlamaServer
from tests.live.conftest import NO_EOS, chat, config, gated, outcomes, poll
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio

ASKED = 2000


@pytest.mark.parametrize("how", ["aclose", "cancel scope"])
async def test_cancelling_mid_stream_frees_the_slot_and_the_ticket_once(
    server: LlamaServer, how: str
) -> None:
    policy = Policy(config())
    async with gated(server, policy) as (client, scraper):
        before = await poll(scraper, lambda reading: reading.running == 0)
        predicted_before = before.predicted_total
        stream = await client.chat_stream(
            model="tiny", messages=chat("a long story, please"), max_tokens=ASKED,
            tenant="acme", lane="interactive", extra_body=NO_EOS,
        )  # fmt: skip
        running = await poll(scraper, lambda reading: reading.running == 1)
        assert running.kv_tokens > 0
        seen = 0
        with anyio.CancelScope() as scope:
            async with stream:
                async for chunk in stream:
                    seen += bool(chunk.choices and chunk.choices[0].delta.content)
                    if seen == 3:
                        if how == "aclose":
                            break
                        scope.cancel()
        assert stream.finished is not None
        assert stream.finished.outcome is Outcome.CANCELLED
        after = await poll(scraper, lambda reading: reading.running == 0)
        assert after.kv_tokens == 0
        assert after.predicted_total is not None
        assert predicted_before is not None
        assert 3 <= after.predicted_total - predicted_before < ASKED // 2
    assert before.running == 0
    assert outcomes(policy) == {Outcome.CANCELLED: 1}
    assert_clean(policy)
