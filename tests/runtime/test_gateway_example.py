"""The example Starlette gateway, driven through httpx's ASGI transport."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from examples.gateway_starlette import create_app
from slopolicy import Gate, Outcome, Policy
from slopolicy.testing.fake_engine import FakeEngine
from tests.runtime.conftest import assert_clean, policy

pytestmark = pytest.mark.anyio

URL = "/v1/chat/completions"


def _body(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    body.update(fields)
    return body


@asynccontextmanager
async def _client(
    p: Policy, engine: FakeEngine, **gate_options: Any
) -> AsyncIterator[httpx.AsyncClient]:
    async with Gate(p, **gate_options) as gate:
        transport = httpx.ASGITransport(app=create_app(gate, engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            yield client


def _events(text: str) -> list[Any]:
    data = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(item) for item in data[:-1]]


async def test_a_streamed_completion_goes_through_the_gate() -> None:
    p = policy()
    engine = FakeEngine(ttft=0.05, per_token=0.01, tokens_per_chunk=2)
    async with _client(p, engine) as client:
        body = _body(max_tokens=5, stream=True, stream_options={"include_usage": True})
        response = await client.post(URL, json=body, headers={"x-tenant": "acme"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = _events(response.text)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert text.split() == ["t0", "t1", "t2", "t3", "t4"]
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["usage"]["completion_tokens"] == 5
    assert p.statistics().outcomes[Outcome.COMPLETED] == 1
    assert_clean(p)


async def test_a_plain_completion_and_the_status_page() -> None:
    p = policy()
    async with _client(p, FakeEngine(output_tokens=3)) as client:
        response = await client.post(URL, json=_body(max_tokens=8), headers={"x-lane": "heavy"})
        page = (await client.get("/v1/slopolicy/status")).json()
    assert response.status_code == 200
    reply = response.json()
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"]["content"] == "t0 t1 t2"
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["usage"]["completion_tokens"] == 3
    assert page["outcomes"]["completed"] == 1
    assert page["waiting"] == 0
    assert_clean(p)


async def test_refusals_are_openai_errors_with_status_and_retry_after() -> None:
    p = policy()
    async with _client(p, FakeEngine()) as client:
        huge = _body(messages=[{"role": "user", "content": "word " * 5000}])
        too_long = await client.post(URL, json=huge)
        bad = await client.post(URL, json=_body(max_tokens=0))
        broken = await client.post(
            URL, content=b"{nope", headers={"content-type": "application/json"}
        )
        held = await client.post(URL, json=_body(max_tokens=2), headers={"x-tenant": "small"})
    assert too_long.status_code == 413
    assert too_long.json()["error"]["code"] == "prompt_too_long"
    assert too_long.json()["error"]["type"] == "invalid_request_error"
    assert "retry-after" not in too_long.headers
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "max_new_tokens"
    assert broken.status_code == 400
    assert broken.json()["error"]["code"] == "invalid_request"
    assert held.status_code == 200
    assert_clean(p)


async def test_a_tenant_over_its_concurrency_gets_429_with_retry_after() -> None:
    p = policy()
    engine = FakeEngine(ttft=1.0)
    async with _client(p, engine) as client:
        responses: list[httpx.Response] = []

        async def post() -> None:
            body = _body(max_tokens=2)
            responses.append(await client.post(URL, json=body, headers={"x-tenant": "small"}))

        async with anyio.create_task_group() as group:
            group.start_soon(post)
            await anyio.sleep(0.5)
            group.start_soon(post)
    first, second = responses[1], responses[0]  # the refusal comes back first
    assert first.status_code == 200
    assert second.status_code == 429
    assert second.headers["retry-after"] == "1"  # the gateway's default for an unknown wait
    assert second.headers["x-slopolicy-reason"] == "concurrency_limited"
    assert second.json()["error"]["type"] == "rate_limit_error"
    assert_clean(p)


async def test_an_engine_failure_mid_stream_is_reported_in_stream() -> None:
    p = policy()
    async with _client(p, FakeEngine(fail_at=2)) as client:
        response = await client.post(URL, json=_body(max_tokens=5, stream=True))
        plain = await client.post(URL, json=_body(max_tokens=5))
    assert response.status_code == 200
    events = _events(response.text)
    assert events[-1]["error"]["code"] == "engine_error"
    assert plain.status_code == 502
    assert plain.json()["error"]["code"] == "engine_error"
    assert p.statistics().outcomes[Outcome.FAILED] == 2
    assert_clean(p)


def _scope(spec_version: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": spec_version},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": URL,
        "raw_path": URL.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"x-tenant", b"acme")],
        "client": ("client", 1234),
        "server": ("gateway", 80),
    }


@pytest.mark.parametrize("spec_version", ["2.0", "2.4"])
async def test_a_client_disconnect_mid_stream_cancels_the_request(spec_version: str) -> None:
    p = policy()
    engine = FakeEngine(ttft=0.05, per_token=0.05)
    body = json.dumps(_body(max_tokens=50, stream=True)).encode()
    gone = anyio.Event()
    chunks: list[bytes] = []
    asked = False

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            if gone.is_set():  # ASGI 2.4 servers raise on a send after a disconnect
                raise OSError("connection reset")
            chunks.append(message["body"])
            if len(chunks) == 4:
                gone.set()

    async with Gate(p) as gate:
        app = create_app(gate, engine)
        await app(_scope(spec_version), receive, send)  # type: ignore[arg-type]
        assert engine.active == 0  # the engine stream was closed
    assert len(chunks) < 10
    assert p.statistics().outcomes[Outcome.CANCELLED] == 1
    assert_clean(p)
