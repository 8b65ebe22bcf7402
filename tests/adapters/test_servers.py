"""The local engine servers' bytes on the wire, read raw with httpx: the
framing the adapters' tests rely on (see ``tests/adapters/servers.py``)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.adapters.servers import Recorder, Script


def events(url: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> list[str]:
    """The body of a streamed answer split into SSE events (each must end ``\\n\\n``)."""
    with httpx.Client(base_url=url, timeout=5.0) as http:
        response = http.post(path, json=body, headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    raw = response.text
    assert raw.endswith("\n\n")
    return raw.removesuffix("\n\n").split("\n\n")


def payloads(frames: list[str]) -> list[Any]:
    assert all(frame.startswith("data: ") for frame in frames), frames
    return [frame.removeprefix("data: ") for frame in frames]


def test_vllm_streams_its_usage_chunk_then_done(vllm_url: str, recorder: Recorder) -> None:
    headers = recorder.script("wire-vllm", Script(tokens=2))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    body["stream_options"] = {"include_usage": True}
    data = payloads(events(vllm_url, "/v1/chat/completions", body, headers))
    assert data[-1] == "[DONE]"
    chunks = [json.loads(text) for text in data[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["finish_reason"] for c in chunks[1:3]] == [None, "length"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 2


def test_vllm_errors_before_and_inside_the_stream(vllm_url: str, recorder: Recorder) -> None:
    refused = recorder.script("wire-vllm-503", Script(status=503, message="busy", retry_after="2"))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.Client(base_url=vllm_url, timeout=5.0) as http:
        response = http.post("/v1/chat/completions", json=body, headers=refused)
    assert (response.status_code, response.headers["retry-after"]) == (503, "2")
    assert response.json() == {
        "error": {"message": "busy", "type": "BadRequestError", "param": None, "code": 503}
    }
    broken = recorder.script("wire-vllm-broken", Script(tokens=3, fail_after=1, message="x"))
    data = payloads(events(vllm_url, "/v1/chat/completions", body, broken))
    assert data[-1] == "[DONE]"
    error = {"message": "x", "type": "InternalServerError", "param": None, "code": 500}
    assert json.loads(data[-2]) == {"error": error}


def test_tgi_streams_without_done_and_reports_errors_as_events(
    tgi_url: str, recorder: Recorder
) -> None:
    headers = recorder.script("wire-tgi", Script(tokens=2))
    body = {"inputs": "hi", "parameters": {"details": True}}
    data = [
        json.loads(text) for text in payloads(events(tgi_url, "/generate_stream", body, headers))
    ]
    assert [event["token"]["text"] for event in data] == ["t0 ", "t1 "]
    assert (data[0]["details"], data[-1]["details"]["generated_tokens"]) == (None, 2)
    overloaded = recorder.script("wire-tgi-busy", Script(status=429))
    data = payloads(events(tgi_url, "/generate_stream", body, overloaded))
    assert [json.loads(text) for text in data] == [
        {"error": "Model is overloaded", "error_type": "overloaded"}
    ]


def test_tgi_messages_api_ends_with_done(tgi_url: str, recorder: Recorder) -> None:
    headers = recorder.script("wire-tgi-chat", Script(tokens=1, fail_after=0))
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    data = payloads(events(tgi_url, "/v1/chat/completions", body, headers))
    assert data[-1] == "[DONE]"
    assert json.loads(data[0]) == {
        "error": {"message": "Model is overloaded", "http_status_code": 422}
    }
