"""The adapter examples, run against the local engine servers and the fake vLLM."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
import openai
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from examples.gateway_vllm import create_app
from examples.openai_wrapper import run as run_openai
from examples.tgi_wrapper import run
from examples.vllm_inprocess import answer
from slopolicy import Gate, Outcome, Policy
from slopolicy.adapters.openai import GatedOpenAI
from slopolicy.testing.fake_vllm import FakeAsyncLLM, SamplingParams
from tests.adapters.conftest import config, policy
from tests.adapters.servers import Recorder, Script
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi there"}]


@asynccontextmanager
async def gateway(vllm_url: str, p: Policy) -> AsyncIterator[AsyncOpenAI]:
    """An OpenAI client -> the FastAPI gateway (in process) -> GatedOpenAI -> the
    vLLM-like server on 127.0.0.1."""
    async with (
        Gate(p) as gate,
        AsyncOpenAI(base_url=f"{vllm_url}/v1", api_key="-") as upstream,
    ):
        app = create_app(GatedOpenAI(upstream, gate, priorities={"interactive": 1}), model="m")
        transport = httpx2.ASGITransport(app=app)
        async with (
            httpx2.AsyncClient(transport=transport) as http,
            AsyncOpenAI(
                base_url="http://gateway/v1", api_key="-", http_client=http, max_retries=0
            ) as client,
        ):
            yield client


async def test_the_gateway_streams_and_answers(vllm_url: str, recorder: Recorder) -> None:
    recorder.script("gw", Script(tokens=3))  # the upstream picks it by model name
    headers = {"x-tenant": "acme"}
    p = policy()
    async with gateway(vllm_url, p) as client:
        stream = await client.chat.completions.create(
            model="gw", messages=HELLO, stream=True, max_tokens=3, extra_headers=headers
        )
        texts = [c.choices[0].delta.content async for c in stream if c.choices]
        whole = await client.chat.completions.create(
            model="gw", messages=HELLO, max_tokens=2, extra_headers=headers
        )
        assert_clean(p)
    assert texts == ["", "t0 ", "t1 ", "t2 "]
    assert whole.choices[0].message.content == "t0 t1 "
    assert p.statistics().outcomes[Outcome.COMPLETED] == 2
    hits = recorder.hits["gw"]
    assert len(hits) == 2
    assert all(hit.body["priority"] == 1 for hit in hits)


async def test_the_gateway_forwards_a_null_limit_as_not_given(
    vllm_url: str, recorder: Recorder
) -> None:
    """The gateway forwards JSON bodies, nulls included: a ``null``
    ``max_completion_tokens`` must leave ``max_tokens`` the limit."""
    recorder.script("gw-null", Script(tokens=1000))
    async with gateway(vllm_url, policy()) as client:
        whole = await client.chat.completions.create(
            model="gw-null", messages=HELLO, max_tokens=10, max_completion_tokens=None
        )
    body = recorder.hit("gw-null").body
    assert (body["max_tokens"], "max_completion_tokens" in body) == (10, False)
    assert whole.usage is not None
    assert whole.usage.completion_tokens == 10


async def test_the_gateway_passes_refusals_and_failures_on(
    vllm_url: str, recorder: Recorder
) -> None:
    recorder.script("gw-busy", Script(status=503, retry_after="3"))
    recorder.script("gw-broken", Script(tokens=4, fail_after=1, message="CUDA error"))
    p = policy()
    async with gateway(vllm_url, p) as client:
        with pytest.raises(openai.InternalServerError) as refused:
            await client.chat.completions.create(model="gw-busy", messages=HELLO)
        stream = await client.chat.completions.create(
            model="gw-broken", messages=HELLO, stream=True
        )
        with pytest.raises(openai.APIError) as failed:
            [chunk async for chunk in stream]
        assert_clean(p)
    assert refused.value.status_code == 503
    assert refused.value.response.headers["retry-after"] == "3"
    assert refused.value.code == "engine_overloaded"
    assert "CUDA error" in failed.value.message
    assert failed.value.code == "engine_failed"


async def test_the_gateway_refuses_what_the_gate_refuses(vllm_url: str, recorder: Recorder) -> None:
    recorder.script("gw-quota", Script())
    p = Policy(config(tiers={"default": {"rate": 1.0, "burst": 50.0, "max_concurrency": 4}}))
    async with gateway(vllm_url, p) as client:
        with pytest.raises(openai.RateLimitError) as refused:
            await client.chat.completions.create(model="gw-quota", messages=HELLO, max_tokens=500)
    assert refused.value.response.headers["retry-after"]
    assert recorder.hits["gw-quota"] == []


async def test_the_openai_wrapper(vllm_url: str, recorder: Recorder) -> None:
    recorder.script("ex-openai", Script(tokens=3))
    recorder.script("ex-openai-busy", Script(status=503, message="busy"))
    texts = await run_openai(f"{vllm_url}/v1", "ex-openai", "hello", config=config())
    assert texts == ("t0 t1 t2 ", "t0 t1 t2 ")
    hits = recorder.hits["ex-openai"]
    assert [hit.body["priority"] for hit in hits] == [0, 0]  # the interactive lane's
    assert [bool(hit.body.get("stream")) for hit in hits] == [False, True]
    refused = await run_openai(f"{vllm_url}/v1", "ex-openai-busy", "hello", config=config())
    assert refused == ("", "the engine said no: engine_overloaded: busy")


async def test_the_tgi_wrapper(tgi_url: str, recorder: Recorder) -> None:
    recorder.metrics_page, recorder.metrics_status = "", 200
    recorder.script("default", Script(tokens=3))
    assert await run(tgi_url, "hello", config=config()) == "t0 t1 t2 "


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_in_process_vllm_example() -> None:
    engine = FakeAsyncLLM(ttft=0.01, per_token=0.001)
    async with Gate(policy()) as gate:
        text = await answer(engine, gate, "hello", SamplingParams(max_tokens=4))
    assert text == "t0 t1 t2 t3 "
    assert engine.calls[0].priority == 0
