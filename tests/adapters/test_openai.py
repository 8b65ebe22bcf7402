"""The OpenAI-compatible adapter: the real ``openai.AsyncOpenAI`` against a local
vLLM-like server on 127.0.0.1 (see ``tests/adapters/servers.py``), on asyncio and trio."""

from __future__ import annotations

import time

import anyio
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from slopolicy import Outcome, Rejected
from slopolicy.adapters import EngineError, EngineFault, engine_error_response
from slopolicy.core.kv.shares import KVShares
from slopolicy.core.queueing.demand import TenantDemand
from slopolicy.errors import UsageError
from tests.adapters.clients import HELLO, drain
from tests.adapters.clients import openai_gate as gated
from tests.adapters.conftest import LADDER, climb, policy
from tests.adapters.servers import Recorder, Script
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio


async def test_a_streamed_chat_goes_through_the_gate(vllm_url: str, recorder: Recorder) -> None:
    headers = recorder.script("stream-basic", Script(tokens=5))
    async with gated(vllm_url, priorities={"interactive": -10}) as (client, p):
        stream = await client.chat_stream(
            model="m", messages=HELLO, max_tokens=1000, tenant="acme", extra_headers=headers
        )
        async with stream:
            chunks = await drain(stream)
        assert_clean(p)
    hit = recorder.hit("stream-basic")
    # The lane's cap, vLLM's priority for the lane, and the usage chunk asked for.
    assert hit.body["max_tokens"] == 64
    assert hit.body["priority"] == -10
    assert hit.body["stream_options"] == {"include_usage": True}
    assert hit.headers["x-request-id"] == stream.ticket.id
    # The role chunk and five tokens reach the caller; the usage chunk was not asked for.
    assert [c.choices[0].delta.content for c in chunks] == ["", "t0 ", "t1 ", "t2 ", "t3 ", "t4 "]
    assert chunks[-1].choices[0].finish_reason == "length"
    finished = stream.finished
    assert finished is not None
    assert finished.outcome is Outcome.COMPLETED
    assert finished.output_tokens == 5
    assert finished.tenant == "acme"
    assert finished.stages["schedule"] >= 0


async def test_an_over_share_start_is_sent_past_every_lane_s_priority(
    vllm_url: str, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant over its share of a saturated engine (its portion below 1)
    while the KV pool is over-asked (a finite level) gets its lane's priority
    plus the map's span: vLLM preempts it first."""
    monkeypatch.setattr(TenantDemand, "_portion", lambda self, tenant, now: 0.5)
    monkeypatch.setattr(KVShares, "level", property(lambda self: 100.0))  # over-asked
    headers = recorder.script("stream-over", Script(tokens=2))
    priorities = {"interactive": -10, "batch": 10}
    async with gated(vllm_url, priorities=priorities) as (client, p):
        stream = await client.chat_stream(
            model="m", messages=HELLO, max_tokens=8, tenant="acme", extra_headers=headers
        )
        async with stream:
            await drain(stream)
        assert_clean(p)
    assert stream.ticket.started.over_share
    assert recorder.hit("stream-over").body["priority"] == -10 + 21


async def test_the_usage_chunk_passes_when_asked_and_settles_the_charge(
    vllm_url: str, recorder: Recorder
) -> None:
    # Three tokens per chunk (vLLM's stream_interval): chunks undercount, usage settles.
    headers = recorder.script("stream-usage", Script(tokens=9, per_chunk=3))
    async with gated(vllm_url) as (client, p):
        stream = await client.chat_stream(
            model="m",
            messages=HELLO,
            max_tokens=9,
            lane="batch",
            stream_options={"include_usage": True},
            extra_headers=headers,
        )
        chunks = await drain(stream)
        assert_clean(p)
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 9
    assert "priority" not in recorder.hit("stream-usage").body  # no priority map
    assert stream.finished is not None
    assert stream.finished.output_tokens == 9


async def test_ttft_and_tpot_agree_with_when_the_server_sent(
    vllm_url: str, recorder: Recorder
) -> None:
    """The server records ``time.monotonic()`` right after each token chunk went
    to the socket; the request starts at ``t0`` (the same clock, read just
    before the call). Expected TTFT is ``sent[0] - t0`` and expected TPOT
    ``(sent[-1] - sent[0]) / (n - 1)``: what the server actually did, so a
    slow scheduler on a loaded machine moves both sides alike. Only the
    delivery of a chunk (socket to parsed chunk, well under a millisecond)
    separates them. A warm-up request first, so the openai client's lazy
    set-up on its first chunk is not in the measurement.
    """
    script = Script(tokens=6, ttft=0.15, tpot=0.03)
    async with gated(vllm_url) as (client, _):
        await drain(
            await client.chat_stream(
                model="m", messages=HELLO, extra_headers=recorder.script("warm", Script())
            )
        )
        headers = recorder.script("timed", script)
        t0 = time.monotonic()
        stream = await client.chat_stream(
            model="m", messages=HELLO, max_tokens=6, extra_headers=headers
        )
        await drain(stream)
    sent = recorder.hit("timed").sent_at
    finished = stream.finished
    assert finished is not None
    assert finished.ttft is not None
    assert finished.tpot is not None
    assert len(sent) == 6
    assert finished.ttft == pytest.approx(sent[0] - t0, abs=0.010)
    assert finished.tpot == pytest.approx((sent[-1] - sent[0]) / 5, abs=0.010)
    # And the script itself was kept: the first token waited for its prefill.
    assert sent[0] - recorder.hit("timed").received_at >= 0.15


async def test_plain_chat_and_completion_settle_with_usage(
    vllm_url: str, recorder: Recorder
) -> None:
    headers = recorder.script("plain", Script(tokens=3))
    async with gated(vllm_url) as (client, p):
        reply = await client.chat(model="m", messages=HELLO, max_tokens=8, extra_headers=headers)
        done = await client.completion(
            model="m", prompt="once upon a time", max_tokens=2, extra_headers=headers
        )
        assert_clean(p)
    assert reply.response.choices[0].message.content == "t0 t1 t2 "
    assert reply.finished.output_tokens == 3
    assert reply.finished.ttft is None  # nothing reached the caller before the end
    assert done.response.choices[0].text == "t0 t1 "
    assert done.finished.output_tokens == 2
    hits = recorder.hits["plain"]
    assert hits[0].body["max_tokens"] == 8
    assert hits[1].path == "/v1/completions"
    assert hits[1].body["max_tokens"] == 2


async def test_a_streamed_completion(vllm_url: str, recorder: Recorder) -> None:
    headers = recorder.script("completion-stream", Script(tokens=4))
    async with gated(vllm_url) as (client, p):
        stream = await client.completion_stream(
            model="m", prompt="count", max_tokens=4, extra_headers=headers
        )
        texts = [chunk.choices[0].text async for chunk in stream]
        assert_clean(p)
    assert texts == ["t0 ", "t1 ", "t2 ", "t3 "]
    assert stream.finished is not None
    assert stream.finished.outcome is Outcome.COMPLETED


async def test_overload_before_the_stream_is_sent_once_and_maps_to_503(
    vllm_url: str, recorder: Recorder
) -> None:
    script = Script(status=503, message="The engine is currently busy", retry_after="7")
    script.error_type = "Service Unavailable"
    headers = recorder.script("overloaded", script)
    async with gated(vllm_url) as (client, p):
        with pytest.raises(EngineError) as caught:
            await client.chat_stream(model="m", messages=HELLO, extra_headers=headers)
        assert_clean(p)
        assert p.statistics().outcomes[Outcome.FAILED] == 1
    error = caught.value
    assert error.fault is EngineFault.OVERLOADED
    assert (error.engine_status, error.retry_after, error.http_status) == (503, 7.0, 503)
    assert error.finished is not None
    assert error.finished.outcome is Outcome.FAILED
    # The client's own retries (max_retries=2 by default) were kept off.
    assert len(recorder.hits["overloaded"]) == 1
    status, response_headers, body = engine_error_response(error)
    assert (status, response_headers["retry-after"]) == (503, "7")
    assert body["error"]["code"] == "engine_overloaded"


async def test_without_the_adapter_the_client_would_have_sent_it_three_times(
    vllm_url: str, recorder: Recorder
) -> None:
    headers = recorder.script("raw-retries", Script(status=503, retry_after="0"))
    async with AsyncOpenAI(base_url=f"{vllm_url}/v1", api_key="-") as client:
        with pytest.raises(Exception, match="503"):
            await client.chat.completions.create(model="m", messages=HELLO, extra_headers=headers)
    assert len(recorder.hits["raw-retries"]) == 3


@pytest.mark.parametrize(
    ("script", "fault", "outcome", "status"),
    [
        (Script(status=429, message="slow down"), EngineFault.RATE_LIMITED, Outcome.FAILED, 503),
        (
            Script(status=400, message="maximum context length is 4096", param="input_tokens"),
            EngineFault.PROMPT_TOO_LONG,
            Outcome.CANCELLED,
            413,
        ),
        (
            Script(status=400, message="bad top_k"),
            EngineFault.INVALID_REQUEST,
            Outcome.CANCELLED,
            400,
        ),
        (Script(status=500, message="boom"), EngineFault.FAILED, Outcome.FAILED, 502),
        (  # llama.cpp's body: the type names the fault, no param
            Script(
                status=400,
                message="request (9010 tokens) exceeds the available context size (8192 tokens)",
                error_type="exceed_context_size_error",
            ),
            EngineFault.PROMPT_TOO_LONG,
            Outcome.CANCELLED,
            413,
        ),
        (  # llama.cpp while it loads the model
            Script(status=503, message="Loading model", error_type="unavailable_error"),
            EngineFault.OVERLOADED,
            Outcome.FAILED,
            503,
        ),
    ],
    ids=["429", "prompt-too-long", "400", "500", "llama.cpp-context", "llama.cpp-loading"],
)
async def test_refusals_before_the_stream(
    vllm_url: str,
    recorder: Recorder,
    script: Script,
    fault: EngineFault,
    outcome: Outcome,
    status: int,
) -> None:
    headers = recorder.script(f"refusal-{script.status}-{script.param}", script)
    async with gated(vllm_url) as (client, p):
        with pytest.raises(EngineError) as caught:
            await client.chat(model="m", messages=HELLO, extra_headers=headers)
        assert_clean(p)
    error = caught.value
    assert (error.fault, error.outcome, error.http_status) == (fault, outcome, status)
    assert error.engine_status == script.status
    assert error.param == script.param
    assert error.finished is not None
    assert error.finished.outcome is outcome


@pytest.mark.parametrize(
    ("script", "fault"),
    [
        (Script(tokens=5, fail_after=2, message="CUDA error"), EngineFault.FAILED),
        (Script(tokens=5, fail_after=2, flat_error=True), EngineFault.FAILED),
        (Script(tokens=5, fail_after=2, fail_code=503), EngineFault.OVERLOADED),
        (Script(tokens=5, drop_after=2), EngineFault.DISCONNECTED),
        (Script(tokens=5, no_done=True), EngineFault.DISCONNECTED),
    ],
    ids=["error-event", "flat-error-event", "503-event", "dropped", "no-finish"],
)
async def test_faults_inside_the_stream(
    vllm_url: str, recorder: Recorder, script: Script, fault: EngineFault
) -> None:
    headers = recorder.script(f"in-stream-{id(script)}", script)
    async with gated(vllm_url) as (client, p):
        stream = await client.chat_stream(model="m", messages=HELLO, extra_headers=headers)
        seen: list[str | None] = []

        async def read() -> None:
            async with stream:
                async for chunk in stream:
                    seen.append(chunk.choices[0].delta.content)

        with pytest.raises(EngineError) as caught:
            await read()
        assert_clean(p)
    assert caught.value.fault is fault
    assert isinstance(caught.value.__cause__ or caught.value, Exception)
    finished = stream.finished
    assert finished is not None
    assert finished.outcome is Outcome.FAILED
    tokens = 5 if script.no_done else 2
    assert seen[1:] == [f"t{k} " for k in range(tokens)]
    assert finished.output_tokens == tokens  # counted: no usage arrived


async def test_a_slow_first_token_past_the_client_timeout(
    vllm_url: str, recorder: Recorder
) -> None:
    headers = recorder.script("slow", Script(tokens=2, ttft=2.0))
    async with gated(vllm_url, timeout=0.3) as (client, p):
        stream = await client.chat_stream(model="m", messages=HELLO, extra_headers=headers)
        with pytest.raises(EngineError) as caught:
            await drain(stream)
        assert_clean(p)
    assert caught.value.fault is EngineFault.TIMEOUT
    assert caught.value.http_status == 504
    assert recorder.hit("slow").disconnected  # the engine saw the client go


async def test_cancelling_the_reader_cancels_the_ticket_and_the_engine(
    vllm_url: str, recorder: Recorder
) -> None:
    headers = recorder.script("cancelled", Script(tokens=50, tpot=0.02))
    async with gated(vllm_url) as (client, p):
        stream = await client.chat_stream(model="m", messages=HELLO, extra_headers=headers)
        with anyio.move_on_after(0.1):
            async with stream:
                await drain(stream)
        assert_clean(p)
        assert p.statistics().outcomes[Outcome.CANCELLED] == 1
    assert recorder.hit("cancelled").disconnected


async def test_a_stream_closed_before_reading_releases_and_disconnects(
    vllm_url: str, recorder: Recorder
) -> None:
    headers = recorder.script("abandoned", Script(tokens=5, ttft=0.5))
    async with gated(vllm_url) as (client, p):
        stream = await client.chat_stream(model="m", messages=HELLO, extra_headers=headers)
        await stream.aclose()
        assert_clean(p)
    assert stream.finished is not None
    assert stream.finished.outcome is Outcome.CANCELLED
    assert recorder.hit("abandoned").disconnected


async def test_a_refusal_by_the_gate_sends_nothing(vllm_url: str, recorder: Recorder) -> None:
    headers = recorder.script("refused", Script())
    long_text: list[ChatCompletionMessageParam] = [{"role": "user", "content": "word " * 40_000}]
    async with gated(vllm_url) as (client, p):
        with pytest.raises(Rejected) as caught:
            await client.chat(model="m", messages=long_text, extra_headers=headers)
        assert_clean(p)
    assert caught.value.code in ("prompt_too_long", "prompt_over_budget")
    assert recorder.hits["refused"] == []


async def test_known_prompt_tokens_skip_counting_content(vllm_url: str, recorder: Recorder) -> None:
    headers = recorder.script("image", Script(tokens=1))
    image: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    ]
    async with gated(vllm_url) as (client, _):
        reply = await client.chat(
            model="m", messages=image, prompt_tokens=700, extra_headers=headers
        )
    assert reply.finished.prompt_tokens == 700
    assert recorder.hit("image").body["messages"] == image


async def test_the_ladder_rewrites_what_is_sent(vllm_url: str, recorder: Recorder) -> None:
    headers = recorder.script("ladder", Script(tokens=2))
    async with gated(vllm_url, policy(ladder=LADDER)) as (client, p):
        await climb(client.gate, 2)
        reply = await client.chat(
            model="big",
            messages=HELLO,
            lane="batch",
            n=2,
            logprobs=True,
            top_logprobs=3,
            max_completion_tokens=4,
            extra_headers=headers,
        )
        assert_clean(p)
    body = recorder.hit("ladder").body
    assert (body["model"], body["n"], body["max_completion_tokens"]) == ("small", 1, 4)
    assert "logprobs" not in body
    assert "top_logprobs" not in body
    assert "max_tokens" not in body
    assert reply.finished.output_tokens == 2


async def test_a_bad_keyword_releases_the_ticket_and_sends_nothing(
    vllm_url: str, recorder: Recorder
) -> None:
    headers = recorder.script("typo", Script())
    async with gated(vllm_url) as (client, p):
        with pytest.raises(TypeError):
            await client.chat(model="m", messages=HELLO, tempurature=0.5, extra_headers=headers)
        with pytest.raises(TypeError):
            await client.chat_stream(
                model="m", messages=HELLO, stream_options=True, extra_headers=headers
            )
        with pytest.raises(UsageError, match="chat_stream"):
            await client.chat(model="m", messages=HELLO, stream=True, extra_headers=headers)
        assert_clean(p)
        assert p.statistics().outcomes[Outcome.CANCELLED] == 2
    assert recorder.hits["typo"] == []


async def test_the_callers_request_id_header_is_kept(vllm_url: str, recorder: Recorder) -> None:
    headers = recorder.script("own-id", Script(tokens=1)) | {"x-request-id": "mine"}
    async with gated(vllm_url) as (client, _):
        await client.chat(model="m", messages=HELLO, request_id="policy-id", extra_headers=headers)
    assert recorder.hit("own-id").headers["x-request-id"] == "mine"
