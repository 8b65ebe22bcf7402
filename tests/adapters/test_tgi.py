"""The TGI adapter: the real ``huggingface_hub.AsyncInferenceClient`` against a local
TGI-like router on 127.0.0.1 (see ``tests/adapters/tgi_server.py``).

huggingface_hub 2.4's async client speaks through httpx2 (anyio), so streamed
calls and ``chat_completion`` run on asyncio and trio; its non-streamed
``text_generation`` parses in ``asyncio.to_thread``, so on trio the adapter
refuses it before admission.
"""

from __future__ import annotations

import time

import anyio
import pytest

from slopolicy import Outcome
from slopolicy.adapters import EngineError, EngineFault
from slopolicy.errors import UsageError
from tests.adapters.clients import HELLO, drain
from tests.adapters.clients import tgi_gate as gated
from tests.adapters.conftest import LADDER, climb, policy
from tests.adapters.servers import Recorder, Script
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio


async def test_a_streamed_text_generation(tgi_url: str, recorder: Recorder) -> None:
    """TTFT and TPOT against the server's actual send times, as in the OpenAI
    adapter's test (same clock; a warm-up request first)."""
    async with gated(tgi_url, recorder.script("tgi-warm", Script())) as (warm, _):
        await drain(await warm.text_generation_stream("hi"))
    headers = recorder.script("tgi-stream", Script(tokens=5, ttft=0.12, tpot=0.03))
    async with gated(tgi_url, headers) as (client, p):
        t0 = time.monotonic()
        stream = await client.text_generation_stream(
            "tell me a story", max_new_tokens=1000, tenant="acme"
        )
        async with stream:
            events = await drain(stream)
        assert_clean(p)
    hit = recorder.hit("tgi-stream")
    assert hit.path == "/"
    assert hit.body["stream"] is True
    assert hit.body["parameters"]["max_new_tokens"] == 64  # the interactive lane's cap
    assert hit.body["parameters"]["details"] is True
    assert [e.token.text for e in events] == ["t0 ", "t1 ", "t2 ", "t3 ", "t4 "]
    assert events[-1].details.generated_tokens == 5
    finished = stream.finished
    assert finished is not None
    assert finished.outcome is Outcome.COMPLETED
    assert finished.output_tokens == 5
    assert finished.ttft is not None
    assert finished.tpot is not None
    assert finished.ttft == pytest.approx(hit.sent_at[0] - t0, abs=0.010)
    assert finished.tpot == pytest.approx((hit.sent_at[-1] - hit.sent_at[0]) / 4, abs=0.010)


async def test_a_streamed_chat_settles_with_usage(tgi_url: str, recorder: Recorder) -> None:
    headers = recorder.script("tgi-chat-stream", Script(tokens=4))
    async with gated(tgi_url, headers) as (client, p):
        hidden = await client.chat_stream(HELLO, max_tokens=4, lane="batch")
        quiet = await drain(hidden)
        shown = await client.chat_stream(
            HELLO, max_tokens=4, stream_options={"include_usage": True}
        )
        loud = await drain(shown)
        assert_clean(p)
    assert [c.choices[0].delta.content for c in quiet] == ["t0 ", "t1 ", "t2 ", "t3 "]
    assert loud[-1].choices == []
    assert loud[-1].usage.completion_tokens == 4
    for stream in (hidden, shown):
        assert stream.finished is not None
        assert stream.finished.output_tokens == 4
    assert recorder.hits["tgi-chat-stream"][0].body["stream_options"] == {"include_usage": True}


async def test_a_whole_chat(tgi_url: str, recorder: Recorder) -> None:
    headers = recorder.script("tgi-chat", Script(tokens=3))
    async with gated(tgi_url, headers) as (client, p):
        reply = await client.chat(HELLO, max_tokens=9)
        assert_clean(p)
    assert reply.response.choices[0].message.content == "t0 t1 t2 "
    assert reply.finished.output_tokens == 3


@pytest.mark.parametrize("anyio_backend", ["trio"])  # on asyncio: the next test
async def test_a_whole_text_generation_on_trio_is_refused_before_admission(
    tgi_url: str, recorder: Recorder
) -> None:
    """huggingface_hub parses the answer in ``asyncio.to_thread``: on trio the
    call is a misuse, refused before the gate admits it or TGI generates."""
    async with gated(tgi_url, recorder.script("tgi-whole-trio", Script())) as (client, p):
        with pytest.raises(UsageError, match="text_generation_stream"):
            await client.text_generation("hi", max_new_tokens=7)
        assert p.statistics().submitted == 0
    assert recorder.hits["tgi-whole-trio"] == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # huggingface_hub: asyncio.to_thread
async def test_a_whole_text_generation_and_its_refusal(tgi_url: str, recorder: Recorder) -> None:
    async with gated(tgi_url, recorder.script("tgi-whole", Script(tokens=3))) as (client, p):
        reply = await client.text_generation("hi", max_new_tokens=7, best_of=2, lane="batch")
        assert_clean(p)
    assert reply.response.generated_text == "t0 t1 t2 "
    assert reply.finished.output_tokens == 3
    assert recorder.hit("tgi-whole").body["parameters"]["best_of"] == 2
    overloaded = recorder.script("tgi-whole-429", Script(status=429))
    async with gated(tgi_url, overloaded) as (client, p):
        with pytest.raises(EngineError) as caught:
            await client.text_generation("hi")
        assert_clean(p)
    assert caught.value.fault is EngineFault.OVERLOADED


@pytest.mark.parametrize(
    ("script", "fault", "outcome", "tokens"),
    [
        (Script(status=429, tgi_error_type="overloaded"), EngineFault.OVERLOADED, "failed", 0),
        (
            Script(status=422, tgi_error_type="validation"),
            EngineFault.PROMPT_TOO_LONG,
            "cancelled",
            0,
        ),
        (
            Script(tokens=5, fail_after=2, tgi_error_type="generation"),
            EngineFault.FAILED,
            "failed",
            2,
        ),
        (Script(tokens=5, drop_after=2), EngineFault.DISCONNECTED, "failed", 2),
    ],
    ids=["overloaded", "prompt-too-long", "generation-error", "dropped"],
)
async def test_errors_inside_a_text_generation_stream(
    tgi_url: str,
    recorder: Recorder,
    script: Script,
    fault: EngineFault,
    outcome: str,
    tokens: int,
) -> None:
    """TGI answers 200 and reports errors as ``data:`` events, with no ``[DONE]``."""
    headers = recorder.script(f"tgi-in-stream-{id(script)}", script)
    async with gated(tgi_url, headers) as (client, p):
        stream = await client.text_generation_stream("hi", max_new_tokens=8)
        with pytest.raises(EngineError) as caught:
            await drain(stream)
        assert_clean(p)
    assert caught.value.fault is fault
    assert stream.finished is not None
    assert stream.finished.outcome is Outcome(outcome)
    assert stream.finished.output_tokens == tokens


@pytest.mark.parametrize(
    ("script", "fault"),
    [
        (Script(tokens=5, fail_after=1, tgi_error_type="overloaded"), EngineFault.OVERLOADED),
        (Script(tokens=5, fail_after=1, tgi_error_type="validation"), EngineFault.PROMPT_TOO_LONG),
        (Script(tokens=5, fail_after=1, tgi_error_type="generation"), EngineFault.FAILED),
        (Script(status=429, tgi_error_type="overloaded"), EngineFault.OVERLOADED),
        (Script(status=422, tgi_error_type="validation"), EngineFault.PROMPT_TOO_LONG),
    ],
    ids=["event-overloaded", "event-validation", "event-generation", "429", "422"],
)
async def test_errors_of_the_messages_api(
    tgi_url: str, recorder: Recorder, script: Script, fault: EngineFault
) -> None:
    """In a stream the Messages API sends ``{"error": {"message", "http_status_code":
    422}}`` for every error, then ``[DONE]``; before it, the status and ``error_type``."""
    headers = recorder.script(f"tgi-chat-error-{id(script)}", script)
    async with gated(tgi_url, headers) as (client, p):
        with pytest.raises(EngineError) as caught:
            await drain(await client.chat_stream(HELLO))
        assert_clean(p)
    assert caught.value.fault is fault
    if script.status != 200:
        assert caught.value.engine_status == script.status


async def test_a_stream_stopped_early_disconnects_from_tgi(
    tgi_url: str, recorder: Recorder
) -> None:
    """huggingface_hub would keep the response open until the client closes;
    the adapter closes it, so TGI sees the client go."""
    headers = recorder.script("tgi-stop", Script(tokens=100, tpot=0.02))
    async with gated(tgi_url, headers) as (client, p):
        stream = await client.text_generation_stream("hi", max_new_tokens=100)
        with anyio.move_on_after(0.15):
            async with stream:
                await drain(stream)
        assert_clean(p)
        hit = recorder.hit("tgi-stop")
        assert hit.disconnected  # while the client is still open
    assert stream.finished is not None
    assert stream.finished.outcome is Outcome.CANCELLED


async def test_a_slow_first_token_past_the_client_timeout(tgi_url: str, recorder: Recorder) -> None:
    headers = recorder.script("tgi-slow", Script(tokens=2, ttft=2.0))
    async with gated(tgi_url, headers, client_timeout=0.3) as (client, p):
        stream = await client.text_generation_stream("hi")
        with pytest.raises(EngineError) as caught:
            await drain(stream)
        assert_clean(p)
    assert caught.value.fault is EngineFault.TIMEOUT
    assert recorder.hit("tgi-slow").disconnected


async def test_the_ladder_rewrites_a_chat(tgi_url: str, recorder: Recorder) -> None:
    headers = recorder.script("tgi-ladder", Script(tokens=2))
    async with gated(tgi_url, headers, p=policy(ladder=LADDER)) as (client, p):
        await climb(client.gate, 2)
        stream = await client.chat_stream(HELLO, model="big", n=2, max_tokens=4, lane="batch")
        await drain(stream)
        assert_clean(p)
    body = recorder.hit("tgi-ladder").body
    assert (body["model"], body["n"], body["max_tokens"]) == ("small", 1, 4)


async def test_a_bad_keyword_releases_the_ticket_and_sends_nothing(
    tgi_url: str, recorder: Recorder
) -> None:
    headers = recorder.script("tgi-typo", Script())
    async with gated(tgi_url, headers) as (client, p):
        with pytest.raises(TypeError):
            await client.text_generation_stream("hi", tempurature=0.5)
        with pytest.raises(TypeError):
            await client.chat_stream(HELLO, stream_options={"include_usage": True, "x": 1})
        with pytest.raises(UsageError, match="details"):
            await client.text_generation_stream("hi", details=False)
        with pytest.raises(UsageError, match="chat_stream"):
            await client.chat(HELLO, stream=True)
        assert_clean(p)
        assert p.statistics().outcomes[Outcome.CANCELLED] == 2
    assert recorder.hits["tgi-typo"] == []


async def test_every_call_sends_its_request_id(tgi_url: str, recorder: Recorder) -> None:
    """As every adapter does: the ticket's id as ``X-Request-Id`` (in place of
    a client-wide one), for each of the four calls; the client is left as it was."""
    headers = recorder.script("tgi-ids", Script(tokens=2)) | {"X-Request-ID": "client-wide"}
    async with gated(tgi_url, headers) as (client, _):
        text = await client.text_generation_stream("hi", request_id="text-stream")
        async with text:
            await drain(text)
        chat_stream = await client.chat_stream(HELLO, request_id="chat-stream")
        async with chat_stream:
            await drain(chat_stream)
        chat = await client.chat(HELLO)
        assert client.client.headers == headers
    ids = [hit.headers["x-request-id"] for hit in recorder.hits["tgi-ids"]]
    assert ids == ["text-stream", "chat-stream", chat.finished.id]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # huggingface_hub: asyncio.to_thread
async def test_a_whole_text_generation_sends_its_request_id(
    tgi_url: str, recorder: Recorder
) -> None:
    async with gated(tgi_url, recorder.script("tgi-whole-id", Script(tokens=1))) as (client, _):
        reply = await client.text_generation("hi")
    assert recorder.hit("tgi-whole-id").headers["x-request-id"] == reply.finished.id
