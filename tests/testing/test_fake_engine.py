"""The fake engine streams on the anyio clock, fails on cue and counts streams."""

from __future__ import annotations

import anyio
import pytest

from slopolicy import Request, UsageError
from slopolicy.testing.fake_engine import Chunk, EngineError, FakeEngine

pytestmark = pytest.mark.anyio


async def _collect(
    engine: FakeEngine, request: Request, **options: int
) -> list[tuple[float, Chunk]]:
    start = anyio.current_time()
    return [
        (anyio.current_time() - start, chunk) async for chunk in engine.stream(request, **options)
    ]


async def test_chunks_arrive_at_ttft_then_per_token() -> None:
    engine = FakeEngine(ttft=0.5, per_token=0.1, tokens_per_chunk=3)
    timed = await _collect(engine, Request(id="r", prompt_tokens=1, max_new_tokens=7))
    assert [round(t, 6) for t, _ in timed] == [0.5, 0.8, 0.9]
    assert [(c.index, c.tokens, c.last) for _, c in timed] == [
        (0, 3, False),
        (3, 3, False),
        (6, 1, True),
    ]
    assert timed[0][1].text == "t0 t1 t2"
    assert timed[0][1].request_id == "r"
    assert (engine.active, engine.peak, engine.started) == (0, 1, 1)


async def test_it_fails_instead_of_yielding_the_failing_token() -> None:
    engine = FakeEngine(ttft=0, per_token=0, tokens_per_chunk=2)
    request = Request(id="r", prompt_tokens=1, max_new_tokens=10)
    seen: list[int] = []

    async def read() -> None:
        async for chunk in engine.stream(request, fail_at=5):
            seen.append(chunk.index)

    with pytest.raises(EngineError) as caught:
        await read()
    assert seen == [0, 2]  # the chunk holding token 5 (tokens 4-5) is never yielded
    assert (caught.value.request_id, caught.value.index) == ("r", 5)
    with pytest.raises(EngineError):
        await engine.complete(request, fail_at=0)
    assert await engine.complete(request, output_tokens=3) == 3
    assert engine.active == 0


async def test_overlapping_streams_are_counted() -> None:
    engine = FakeEngine(ttft=1.0)
    async with anyio.create_task_group() as group:
        for k in range(3):
            group.start_soon(
                engine.complete, Request(id=f"r{k}", prompt_tokens=1, max_new_tokens=2)
            )
        await anyio.sleep(0.5)
        assert engine.active == 3
    assert (engine.active, engine.peak, engine.started) == (0, 3, 3)


def test_a_chunk_must_carry_a_token() -> None:
    with pytest.raises(UsageError):
        FakeEngine(tokens_per_chunk=0)
