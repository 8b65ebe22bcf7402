"""Tracking engine streams and releasing tickets exactly once, on every exit path."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest

from slopolicy import Gate, Outcome, Request, UsageError
from slopolicy.core.checks import shown
from slopolicy.runtime import Ticket
from slopolicy.testing.fake_engine import Chunk, EngineError, FakeEngine
from tests.runtime.conftest import assert_clean, policy

pytestmark = pytest.mark.anyio


def _request(name: str = "r", **fields: object) -> Request:
    values: dict[str, object] = {"tenant": "t", "prompt_tokens": 50, "max_new_tokens": 10}
    values.update(fields)
    return Request(id=name, **values)  # type: ignore[arg-type]


async def test_a_stream_run_to_its_end_completes_with_ttft_and_tpot() -> None:
    p = policy()
    engine = FakeEngine(ttft=0.2, per_token=0.05)
    async with Gate(p) as gate, gate.admit(_request()) as ticket:
        await anyio.sleep(0.1)  # the host's own work before the engine starts
        chunks = [chunk async for chunk in ticket.track(engine.stream(ticket.request))]
        finished = ticket.finished
        assert finished is not None  # released at the stream's end, inside the block
    assert len(chunks) == 10
    assert chunks[-1].last
    assert finished.outcome is Outcome.COMPLETED
    assert finished.output_tokens == 10
    assert finished.ttft == pytest.approx(0.3)
    assert finished.tpot == pytest.approx(0.05)
    assert finished.stages["queue"] == 0
    assert finished.stages["schedule"] == pytest.approx(0.1)
    assert engine.active == 0
    assert_clean(p)


async def test_multi_token_chunks_count_tokens_and_usage_overrides_the_count() -> None:
    p = policy()
    engine = FakeEngine(ttft=0.1, per_token=0.01, tokens_per_chunk=4)

    def usage(chunk: Chunk) -> int | None:
        return 12 if chunk.last else None

    async with Gate(p) as gate:
        async with gate.admit(_request("a")) as ticket:
            async for chunk in ticket.track(engine.stream(ticket.request), tokens_of=_tokens):
                assert chunk.tokens in (4, 2)
        assert ticket.finished is not None
        assert ticket.finished.output_tokens == 10
        async with gate.admit(_request("b")) as ticket:
            stream = engine.stream(ticket.request)
            async for _ in ticket.track(stream, tokens_of=_tokens, usage_of=usage):
                pass
        assert ticket.finished is not None
        assert ticket.finished.output_tokens == 12
    assert_clean(p)


def _tokens(chunk: Chunk) -> int:
    return chunk.tokens


# What a host callback may return that is no token count: NaN (json.loads
# yields it), a negative, a string, past 2**53, a bool, a float.
_BAD_COUNTS: tuple[object, ...] = (math.nan, -1, "7", 10**400, 2**53 + 1, True, 7.0)


@pytest.mark.parametrize("bad", _BAD_COUNTS, ids=shown)
@pytest.mark.parametrize("source", ["tokens_of", "usage_of"])
async def test_a_bad_count_from_a_callback_is_left_out_and_the_ticket_still_releases(
    source: str, bad: object, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: the count reached the policy unchecked; the release raised in
    # the middle (NaN) or the chunk did ("7"), and running and the tenant's
    # in-flight count stayed at 1 for good.
    p = policy()
    engine = FakeEngine(ttft=0.1, per_token=0.01, tokens_per_chunk=2)

    def tokens(chunk: Chunk) -> Any:
        return bad if source == "tokens_of" and chunk.index in (2, 6) else chunk.tokens

    def usage(chunk: Chunk) -> Any:
        if source != "usage_of" or chunk.index < 4:
            return None
        return 9 if chunk.index == 4 else bad

    with caplog.at_level(logging.WARNING, logger="slopolicy.gate"):
        async with Gate(p) as gate, gate.admit(_request()) as ticket:
            stream = ticket.track(engine.stream(ticket.request), tokens_of=tokens, usage_of=usage)
            async for _ in stream:
                pass
    finished = ticket.finished
    assert finished is not None
    assert finished.outcome is Outcome.COMPLETED
    # Settled on what was counted without the bad values: two chunks of two
    # left out, or the last good usage (9) instead of the bad ones after it.
    assert finished.output_tokens == (6 if source == "tokens_of" else 9)
    error = ticket.count_error
    assert isinstance(error, UsageError)
    assert str(error).startswith(f"{source} must return ")
    assert [record.getMessage() for record in caplog.records] == [str(error)]  # once
    assert_clean(p)


async def test_good_counts_leave_no_count_error() -> None:
    p = policy()
    async with Gate(p) as gate, gate.admit(_request()) as ticket:
        async for _ in ticket.track(FakeEngine().stream(ticket.request), tokens_of=_tokens):
            pass
    assert ticket.count_error is None
    assert_clean(p)


@pytest.mark.parametrize("bad", _BAD_COUNTS, ids=shown)
async def test_an_explicit_bad_count_raises_and_releases_nothing_until_a_good_one(
    bad: object,
) -> None:
    p = policy()
    async with Gate(p) as gate, gate.admit(_request()) as ticket:
        ticket.tokens(3)
        with pytest.raises(UsageError, match=r"^token count must be"):
            ticket.tokens(bad)  # type: ignore[arg-type]
        with pytest.raises(UsageError, match=r"^output_tokens must be"):
            ticket.finish(output_tokens=bad)  # type: ignore[arg-type]
        assert not ticket.released
        assert p.running == 1
        finished = ticket.finish(output_tokens=5)
    assert finished.output_tokens == 5
    assert_clean(p)


async def test_an_engine_error_fails_the_request() -> None:
    p = policy()
    engine = FakeEngine(fail_at=3)
    tickets: list[Ticket] = []

    async def run(gate: Gate) -> None:
        async with gate.admit(_request()) as ticket:
            tickets.append(ticket)
            async for _ in ticket.track(engine.stream(ticket.request)):
                pass

    async with Gate(p) as gate:
        with pytest.raises(EngineError):
            await run(gate)
    (ticket,) = tickets
    assert ticket.finished is not None
    assert ticket.finished.outcome is Outcome.FAILED
    assert ticket.finished.output_tokens == 3
    assert_clean(p)


async def test_cancelling_the_consumer_mid_stream_cancels_the_request() -> None:
    p = policy()
    engine = FakeEngine(ttft=0.1, per_token=0.1)
    async with Gate(p) as gate:
        with anyio.move_on_after(0.45):
            async with gate.admit(_request()) as ticket:
                async for _ in ticket.track(engine.stream(ticket.request)):
                    pass
    assert ticket.finished is not None
    assert ticket.finished.outcome is Outcome.CANCELLED
    assert ticket.finished.output_tokens == 4
    assert engine.active == 0
    assert_clean(p)


async def test_aclose_is_a_client_disconnect() -> None:
    p = policy()
    engine = FakeEngine()
    async with Gate(p) as gate, gate.admit(_request()) as ticket:
        tracked = ticket.track(engine.stream(ticket.request))
        await tracked.__anext__()
        await tracked.aclose()
        assert ticket.finished is not None
        assert ticket.finished.outcome is Outcome.CANCELLED
        await tracked.aclose()  # idempotent
        with pytest.raises(StopAsyncIteration):
            await tracked.__anext__()
    assert engine.active == 0
    assert_clean(p)


async def test_a_response_generator_closed_by_the_server_cancels_the_request() -> None:
    p = policy()
    engine = FakeEngine()
    tickets: list[Ticket] = []

    async def body(gate: Gate) -> AsyncGenerator[str, None]:
        async with gate.admit(_request()) as ticket:
            tickets.append(ticket)
            async for chunk in ticket.track(engine.stream(ticket.request)):
                yield chunk.text

    async with Gate(p) as gate:
        events = body(gate)
        assert await events.__anext__() == "t0"
        await events.aclose()  # GeneratorExit inside the admit block
    finished = tickets[0].finished
    assert finished is not None
    assert finished.outcome is Outcome.CANCELLED
    assert engine.active == 0
    assert_clean(p)


async def test_stopping_early_cancels_and_closes_the_engine_stream() -> None:
    p = policy()
    engine = FakeEngine()
    async with Gate(p) as gate:
        async with gate.admit(_request()) as ticket:
            async for chunk in ticket.track(engine.stream(ticket.request)):
                if chunk.index == 2:
                    break
            assert engine.active == 1
            assert not ticket.released
        assert engine.active == 0
        assert ticket.finished is not None
        assert ticket.finished.outcome is Outcome.CANCELLED
        # Finishing on purpose before leaving counts the request as completed.
        async with gate.admit(_request("b")) as ticket:
            async for chunk in ticket.track(engine.stream(ticket.request)):
                if chunk.index == 2:
                    ticket.finish()
                    break
        assert ticket.finished is not None
        assert ticket.finished.outcome is Outcome.COMPLETED
        assert ticket.finished.output_tokens == 3
    assert engine.active == 0
    assert_clean(p)


async def test_leaving_the_block_without_tracking() -> None:
    p = policy()
    async with Gate(p) as gate:
        async with gate.admit(_request("quiet")) as quiet:
            pass
        with pytest.raises(ValueError, match="host bug"):
            async with gate.admit(_request("broken")) as broken:
                raise ValueError("host bug")
        with anyio.CancelScope() as scope:
            async with gate.admit(_request("cut")) as cut:
                scope.cancel()
                await anyio.sleep(1)
        with gate.admit_nowait(_request("sync")) as sync:
            sync.tokens(4)
    outcomes = [t.finished.outcome if t.finished else None for t in (quiet, broken, cut, sync)]
    assert outcomes == [Outcome.COMPLETED, Outcome.FAILED, Outcome.CANCELLED, Outcome.COMPLETED]
    assert sync.finished is not None
    assert sync.finished.output_tokens == 4
    assert_clean(p)


async def test_a_released_ticket_passes_the_rest_of_the_stream_through() -> None:
    p = policy()
    engine = FakeEngine()
    async with Gate(p) as gate:
        async with gate.admit(_request()) as ticket:
            tracked = ticket.track(engine.stream(ticket.request))
            with pytest.raises(UsageError, match="already tracking"):
                ticket.track(engine.stream(ticket.request))
            count = 0
            async for _ in tracked:
                count += 1
                if count == 3:
                    ticket.finish("failed")
        assert count == 10
        assert ticket.finished is not None
        assert ticket.finished.outcome is Outcome.FAILED
        assert ticket.finished.output_tokens == 3
    assert_clean(p)


async def test_an_unstarted_tracked_stream_closes_cleanly() -> None:
    p = policy()
    engine = FakeEngine()
    async with Gate(p) as gate, gate.admit(_request()) as ticket:
        ticket.track(engine.stream(ticket.request))
    assert ticket.finished is not None
    assert ticket.finished.outcome is Outcome.CANCELLED
    assert engine.started == 0
    assert_clean(p)
