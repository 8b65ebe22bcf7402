"""A vLLM-like engine for replay tests: :class:`~tests.adapters.vllm_server.VLLMApp`
plus the pages a replay reads (``/v1/models``, ``/tokenize``: one token a
word, as the app's ``usage`` counts) and a count of streams open at once."""

from __future__ import annotations

import threading
from typing import Any

from tests.adapters.servers import Receive, Recorder, Scope, Send, json_response, read_body
from tests.adapters.vllm_server import VLLMApp

MODEL = "fake-model"


class ReplayApp(VLLMApp):
    """Counts the streams open at once (``open``, ``peak``)."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(recorder)
        self.open = 0
        self.peak = 0
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path")
        if path == "/v1/models":
            await json_response(send, 200, {"data": [{"id": MODEL, "owned_by": "vllm"}]}, {})
            return
        if path == "/tokenize":
            body: dict[str, Any] = await read_body(receive)
            await json_response(send, 200, {"count": len(str(body["prompt"]).split())}, {})
            return
        if path == "/props":
            await json_response(send, 404, {"detail": "Not Found"}, {})
            return
        with self._lock:
            self.open += 1
            self.peak = max(self.peak, self.open)
        try:
            await super().__call__(scope, receive, send)
        finally:
            with self._lock:
                self.open -= 1
