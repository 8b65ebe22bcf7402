"""Engines (or proxies) that answer garbage: usage counts of any type or size,
bodies that are not JSON, chunks that cannot be read. An answer that arrived
whole is kept and charged as if the engine had sent no count; a stream that
cannot be read fails as the engine's fault; nothing stays held (the real
clients against the local servers)."""

from __future__ import annotations

import math
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from slopolicy import Outcome
from slopolicy.adapters import EngineError, EngineFault, GatedStream
from tests.adapters.clients import HELLO, drain, openai_gate, tgi_gate
from tests.adapters.servers import Recorder, Script
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio

T = TypeVar("T")


async def _answer_or_error(call: Awaitable[T]) -> T | EngineError:
    try:
        return await call
    except EngineError as error:
        return error


async def _streamed(
    url: str, recorder: Recorder, script: Script
) -> tuple[GatedStream[Any], list[Any] | EngineError]:
    """A chat stream of ``script`` read to its end: the stream, and its chunks
    or the error iterating raised; nothing is left held."""
    headers = recorder.script("garbage-stream", script)
    async with openai_gate(url) as (client, p):
        stream = await client.chat_stream(
            model="m", messages=HELLO, max_tokens=8, extra_headers=headers
        )
        async with stream:
            got = await _answer_or_error(drain(stream))
        assert_clean(p)
    return stream, got


_COUNTS: list[Any] = ["3", -1, 10**30, float("nan"), None, 2.5, True]
_USAGES: list[Any] = [
    *({"prompt_tokens": 1, "completion_tokens": count, "total_tokens": 4} for count in _COUNTS),
    {},
    "lots",
    [1, 2],
]
_IDS = [*(f"count={count!r}" for count in _COUNTS), "no-count", "a-string", "a-list"]
#: Counts the openai client itself turns into ints (it parses leniently).
_OPENAI_READS = {"3": 3, True: 1}


def _openai_count(usage: Any) -> int | None:
    count = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return _OPENAI_READS.get(count) if isinstance(count, (str, bool)) else None


@pytest.mark.parametrize("usage", _USAGES, ids=_IDS)
async def test_a_bad_usage_in_a_whole_answer_charges_the_budget(
    vllm_url: str, recorder: Recorder, usage: Any
) -> None:
    headers = recorder.script("bad-usage", Script(tokens=3, usage=usage))
    async with openai_gate(vllm_url) as (client, p):
        reply = await client.chat(model="m", messages=HELLO, max_tokens=8, extra_headers=headers)
        assert_clean(p)
    assert reply.response.choices[0].message.content == "t0 t1 t2 "
    assert reply.finished.outcome is Outcome.COMPLETED
    # The budget: the engine's count is unknown (unless the client read it as one).
    assert reply.finished.output_tokens == (_openai_count(usage) or 8)


@pytest.mark.parametrize("usage", _USAGES, ids=_IDS)
async def test_a_bad_usage_chunk_keeps_the_counted_tokens(
    vllm_url: str, recorder: Recorder, usage: Any
) -> None:
    stream, got = await _streamed(vllm_url, recorder, Script(tokens=3, usage=usage))
    assert not isinstance(got, EngineError)
    assert stream.finished is not None
    assert stream.finished.outcome is Outcome.COMPLETED
    # Counted as the chunks arrived (unless the client read the count as one).
    assert stream.finished.output_tokens == (_openai_count(usage) or 3)


@pytest.mark.parametrize(
    "answer", [b"not json", b"", b'{"choices": 7, "usage": "lots"}', b"[]", b"null"]
)
async def test_a_whole_answer_that_is_not_one(
    vllm_url: str, recorder: Recorder, answer: bytes
) -> None:
    headers = recorder.script("raw-answer", Script(raw_answer=answer))
    async with openai_gate(vllm_url) as (client, p):
        got = await _answer_or_error(
            client.chat(model="m", messages=HELLO, max_tokens=8, extra_headers=headers)
        )
        assert_clean(p)
    if isinstance(got, EngineError):
        assert got.fault is EngineFault.FAILED
        assert got.finished is not None
    else:  # the client built an object of it: charged as if it had no count
        assert got.finished.output_tokens == 8


@pytest.mark.parametrize(
    "chunk",
    [
        "not json",
        '{"choices": 7}',
        '{"choices": [{"index": [0], "delta": {}, "finish_reason": null}]}',
        '{"choices": [{"index": 0, "delta": null, "finish_reason": null}]}',
        '{"choices": [], "usage": {"completion_tokens": -5}}',
    ],
    ids=["not-json", "choices-an-int", "index-a-list", "delta-null", "negative-usage"],
)
async def test_a_chunk_that_cannot_be_read_fails_the_stream(
    vllm_url: str, recorder: Recorder, chunk: str
) -> None:
    stream, got = await _streamed(vllm_url, recorder, Script(tokens=4, raw_chunk=chunk))
    assert stream.finished is not None
    if isinstance(got, EngineError):
        assert got.fault is EngineFault.FAILED
        assert stream.finished.outcome is Outcome.FAILED
    else:  # one the client could read: no choices, a usage that is no count
        assert stream.finished.outcome is Outcome.COMPLETED
    assert stream.finished.output_tokens <= 8


@pytest.mark.parametrize("count", _COUNTS, ids=[f"count={c!r}" for c in _COUNTS])
async def test_a_bad_tgi_token_count_keeps_the_counted_tokens(
    tgi_url: str, recorder: Recorder, count: Any
) -> None:
    headers = recorder.script("tgi-bad-count", Script(tokens=3, generated_tokens=count))
    async with tgi_gate(tgi_url, headers) as (client, p):
        stream = await client.text_generation_stream("hi", max_new_tokens=8)
        got = await _answer_or_error(drain(stream))
        assert_clean(p)
    assert stream.finished is not None
    if isinstance(got, EngineError):
        # huggingface_hub cannot build an event holding a NaN (it recurses
        # comparing NaN with itself): a broken stream, failed, released.
        assert isinstance(count, float)
        assert math.isnan(count)
        assert got.fault is EngineFault.FAILED
    else:
        assert stream.finished.outcome is Outcome.COMPLETED
        assert stream.finished.output_tokens == 3


@pytest.mark.parametrize("usage", _USAGES, ids=_IDS)
async def test_a_bad_tgi_chat_usage_charges_the_budget(
    tgi_url: str, recorder: Recorder, usage: Any
) -> None:
    headers = recorder.script("tgi-bad-usage", Script(tokens=3, usage=usage))
    async with tgi_gate(tgi_url, headers) as (client, p):
        got = await _answer_or_error(client.chat(HELLO, max_tokens=8))
        assert_clean(p)
    if isinstance(got, EngineError):  # huggingface_hub could not build its output
        assert got.finished is not None
    else:
        assert got.finished.output_tokens == 8


_ERROR_BODIES = [b"not json", b"[1, 2]", b'"busy"', b'{"error": 7, "error_type": []}', b"{}"]


@pytest.mark.parametrize("status", [429, 400, 500])
@pytest.mark.parametrize("body", _ERROR_BODIES)
async def test_an_error_body_that_is_not_one_still_maps_by_status(
    vllm_url: str, recorder: Recorder, status: int, body: bytes
) -> None:
    headers = recorder.script("raw-error", Script(status=status, raw_answer=body))
    async with openai_gate(vllm_url) as (client, p):
        got = await _answer_or_error(client.chat(model="m", messages=HELLO, extra_headers=headers))
        assert_clean(p)
    assert isinstance(got, EngineError)
    assert got.engine_status == status
    assert got.finished is not None


@pytest.mark.parametrize("kind", ["overloaded", "validation"])
@pytest.mark.parametrize("body", _ERROR_BODIES)
async def test_a_tgi_error_body_that_is_not_one_still_fails_the_call(
    tgi_url: str, recorder: Recorder, kind: str, body: bytes
) -> None:
    headers = recorder.script(
        "tgi-raw-error", Script(status=500, tgi_error_type=kind, raw_answer=body)
    )
    async with tgi_gate(tgi_url, headers) as (client, p):
        got = await _answer_or_error(client.chat(HELLO, max_tokens=8))
        assert_clean(p)
    assert isinstance(got, EngineError)
    assert got.finished is not None
