"""Engine faults, for real: llama-server killed mid-stream, then restarted.

Every ticket ends exactly once with the documented outcome
(``docs/adapters.md``, "How engine answers map"): streams cut mid-body and
calls the dead server refuses are ``engine_disconnected``, ``failed``; after
the restart calls complete again. The scraper's failed polls are "no
update", and its rates start over after the restart (the counters went back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anyio
import pytest

from slopolicy import Outcome, Policy
from slopolicy.adapters import EngineError, EngineFault
from slopolicy.testing.llama.server import LlamaServer
from tests.live.conftest import NO_EOS, chat, config, gated, outcomes
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio

SLOTS = 2


@pytest.fixture(scope="module")
def victim(llama_server_factory: Callable[..., LlamaServer]) -> Iterator[LlamaServer]:
    """A server of this module's own: the tests kill it."""
    with llama_server_factory(slots=SLOTS, context=4096) as server:
        yield server


async def test_a_server_killed_mid_stream_ends_every_ticket_once(victim: LlamaServer) -> None:
    policy = Policy(config(SLOTS, victim.context))
    async with gated(victim, policy) as (client, scraper):
        assert await scraper() is not None
        streams = [
            await client.chat_stream(
                model="tiny", messages=chat(f"story {number}"), max_tokens=2000, extra_body=NO_EOS
            )
            for number in range(SLOTS)
        ]
        for stream in streams:  # both are decoding
            await stream.__anext__()
        victim.kill()
        for stream in streams:
            with pytest.raises(EngineError) as cut:
                async for _ in stream:
                    pass
            assert cut.value.fault is EngineFault.DISCONNECTED
            assert stream.finished is not None
            assert stream.finished.outcome is Outcome.FAILED
        with pytest.raises(EngineError) as refused:
            await client.chat(model="tiny", messages=chat("anyone?"), max_tokens=4)
        assert refused.value.fault is EngineFault.DISCONNECTED
        assert await scraper() is None
        assert scraper.consecutive_failures == 1

        with anyio.fail_after(60):
            await victim.astart()
        reply = await client.chat(
            model="tiny", messages=chat("back?"), max_tokens=4, extra_body=NO_EOS
        )
        assert reply.finished.outcome is Outcome.COMPLETED
        assert reply.finished.output_tokens == 4
        signals = await scraper()
        assert signals is not None
        assert signals.running == 0
        assert signals.decode_tps is None  # the counters went back: the rate starts over
    assert outcomes(policy) == {Outcome.FAILED: SLOTS + 1, Outcome.COMPLETED: 1}
    assert_clean(policy)
