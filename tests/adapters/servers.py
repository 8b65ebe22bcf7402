"""Local engine servers for the adapter tests: real HTTP on 127.0.0.1, scripted answers.

:class:`ServerThread` runs an ASGI app under uvicorn in a background thread
(its own asyncio loop) on an ephemeral port. The apps speak the engines' wire
protocols byte for byte as their sources write them:

- :class:`VLLMApp`: vLLM 0.33's OpenAI server (``vllm/entrypoints/openai``):
  ``data: {json}\\n\\n`` chunks, ``data: [DONE]\\n\\n``, the role chunk first,
  the final token with its ``finish_reason``, a ``choices: []`` usage chunk,
  errors as ``{"error": {"message", "type", "param", "code": <status>}}``
  (before the stream with that status; inside it as a ``data:`` line, then
  ``[DONE]``).
- :class:`TGIApp`: TGI's router (axum 0.7.9 writes ``data: `` with a space):
  ``/generate_stream`` (and ``/`` with ``stream: true``) events with no
  ``[DONE]``, errors as ``{"error", "error_type"}`` events on HTTP 200;
  ``/generate`` errors as 429/422/424 with that body; the Messages API with
  its own in-stream error object and ``[DONE]``.

A script can also make the engine answer garbage, as a broken engine or
proxy would: a ``usage`` (or TGI ``generated_tokens``) of any value, a whole
answer replaced by raw bytes, a stream chunk that is not JSON.

Each request picks a :class:`Script` by the ``x-script`` header (or, for
requests relayed by a gateway, by its ``model`` field) and leaves a
:class:`Hit` with the server's ``time.monotonic()`` at receipt and right
after each token chunk was handed to the socket (after ``await send``
returns: uvicorn writes to the transport before that), so tests compare the
adapter's TTFT/TPOT with when bytes actually left.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class Dropped(Exception):
    """Raised inside the app to make uvicorn drop the connection mid-body."""


class _Counted:
    def __repr__(self) -> str:
        return "COUNTED"


#: A :class:`Script` field left as the engine would send it.
COUNTED: Any = _Counted()


@dataclass
class Script:
    """What the server does with one request (times in seconds)."""

    tokens: int = 4  # completion tokens per choice
    ttft: float = 0.0  # receipt -> first token
    tpot: float = 0.0  # between token chunks
    per_chunk: int = 1  # tokens per chunk (vLLM stream_interval > 1)
    finish_reason: str = "length"
    status: int = 200  # not 200: this error before any stream
    message: str = "error"
    error_type: str = "BadRequestError"
    param: str | None = None
    retry_after: str | None = None
    fail_after: int | None = None  # an in-stream error after this many tokens
    fail_code: int = 500
    fail_type: str = "InternalServerError"
    flat_error: bool = False  # older vLLM's flat {"object": "error"} in-stream
    drop_after: int | None = None  # drop the connection after this many tokens
    no_done: bool = False  # end the body without finish_reason or [DONE]
    tgi_error_type: str = "overloaded"  # TGI error events
    usage: Any = COUNTED  # the usage object sent (OpenAI-style answers), as given
    generated_tokens: Any = COUNTED  # TGI details.generated_tokens, as given
    raw_answer: bytes | None = None  # a whole answer's (or error's) body, as given
    raw_chunk: str | None = None  # sent as one stream event after the first token

    def body(self, built: dict[str, Any]) -> bytes | dict[str, Any]:
        """What goes out for an answer (or error) the engine built: ``raw_answer`` if set."""
        return built if self.raw_answer is None else self.raw_answer


@dataclass
class Hit:
    """One request as the server saw it (``time.monotonic()`` seconds)."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    received_at: float
    sent_at: list[float] = field(default_factory=list)  # after each token chunk
    disconnected: bool = False
    done: threading.Event = field(default_factory=threading.Event)


class Recorder:
    """Scripts by name and the hits they produced; shared with the test thread."""

    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.hits: dict[str, list[Hit]] = {}
        self.metrics_page = ""
        self.metrics_status = 200
        self.metrics_delay = 0.0  # seconds between bytes of the page (a slow server)
        self._lock = threading.Lock()

    def script(self, name: str, script: Script) -> dict[str, str]:
        """Register ``script`` under ``name``; the headers that select it."""
        with self._lock:
            self.scripts[name] = script
            self.hits[name] = []
        return {"x-script": name}

    def hit(self, name: str) -> Hit:
        """The only hit for ``name`` (waits for the server to finish it)."""
        hits = self.hits[name]
        assert len(hits) == 1, hits
        assert hits[0].done.wait(5.0), "the server did not finish the request"
        return hits[0]

    def open(self, scope: Scope, body: dict[str, Any]) -> tuple[Script, Hit]:
        """The script a request picks, and its new hit."""
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        name = headers.get("x-script") or str(body.get("model", "default"))
        hit = Hit(scope["path"], body, headers, time.monotonic())
        with self._lock:
            if name not in self.scripts:
                name = "default"
            script = self.scripts.get(name, Script())
            self.hits.setdefault(name, []).append(hit)
        return script, hit


async def read_body(receive: Receive) -> dict[str, Any]:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    raw = b"".join(chunks)
    return json.loads(raw) if raw else {}


async def metrics_response(recorder: Recorder, send: Send) -> None:
    """The Prometheus page the test set (``recorder.metrics_page``), or its
    error status; a byte at a time when ``recorder.metrics_delay`` is set."""
    page = recorder.metrics_page.encode()
    headers = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
    status = recorder.metrics_status
    await send({"type": "http.response.start", "status": status, "headers": headers})
    delay = recorder.metrics_delay
    if delay and status == 200:
        for byte in page:
            await send({"type": "http.response.body", "body": bytes([byte]), "more_body": True})
            await asyncio.sleep(delay)
    await send({"type": "http.response.body", "body": page if status == 200 and not delay else b""})


async def json_response(send: Send, status: int, body: object, headers: dict[str, str]) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    pairs = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    pairs += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": pairs})
    await send({"type": "http.response.body", "body": raw})


class Stream:
    """An SSE body: each ``event`` is written as ``data: {json}\\n\\n``; waits
    are cut short when the client disconnects (as vLLM's ``with_cancellation``)."""

    def __init__(self, receive: Receive, send: Send, hit: Hit) -> None:
        self._send = send
        self.hit = hit
        self._gone = asyncio.Event()
        self._watch = asyncio.ensure_future(self._watch_disconnect(receive))

    async def _watch_disconnect(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._gone.set()

    async def start(self) -> None:
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})

    async def wait(self, seconds: float, until: float | None = None) -> bool:
        """Sleep ``seconds`` (or until monotonic ``until``); False if the client left."""
        if until is not None:
            seconds = until - time.monotonic()
        if seconds > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._gone.wait(), seconds)
        if self._gone.is_set():
            self.hit.disconnected = True
            return False
        return True

    async def data(self, payload: object, *, token: bool = False) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        await self._send(
            {"type": "http.response.body", "body": f"data: {text}\n\n".encode(), "more_body": True}
        )
        if token:
            self.hit.sent_at.append(time.monotonic())

    async def end(self) -> None:
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    def close(self) -> None:
        self._watch.cancel()


class EngineApp(abc.ABC):
    """An engine's ASGI app: ``/metrics`` from the recorder; every other path
    reads its JSON body, picks its script and is answered by :meth:`answer`."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/metrics":
            await metrics_response(self.recorder, send)
            return
        body = await read_body(receive)
        script, hit = self.recorder.open(scope, body)
        stream = Stream(receive, send, hit)
        try:
            await self.answer(scope["path"], body, script, stream, send)
        finally:
            stream.close()
            hit.done.set()

    @abc.abstractmethod
    async def answer(
        self, path: str, body: dict[str, Any], script: Script, stream: Stream, send: Send
    ) -> None:
        """Answer one request as the engine does (``stream`` for SSE bodies)."""


def prompt_tokens(body: dict[str, Any]) -> int:
    if "messages" in body:
        return sum(len(str(m.get("content", "")).split()) for m in body["messages"])
    return len(str(body.get("prompt", body.get("inputs", ""))).split())


class ServerThread:
    """Run an ASGI app under uvicorn on 127.0.0.1 (ephemeral port) in a thread."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._socket = sock
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app,
            lifespan="off",
            loop="asyncio",
            http="h11",
            ws="none",
            log_level="critical",  # a dropped connection logs a traceback by design
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="engine-server", daemon=True)

    def _run(self) -> None:
        self._server.run(sockets=[self._socket])

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()
