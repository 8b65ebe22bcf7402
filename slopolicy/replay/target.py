"""The engine a replay or a calibration talks to: an OpenAI-compatible server at a URL.

:class:`Target` reads what the engine says about itself, on the pages it has:

- llama.cpp's ``llama-server``: ``/props`` (``total_slots``, each slot's
  ``n_ctx``), ``/tokenize`` (``{"content"}`` -> ``{"tokens"}``, no BOS);
- vLLM: ``/metrics``' ``vllm:cache_config_info`` (``num_gpu_blocks`` times
  ``block_size``: the KV pool), ``/tokenize`` (``{"prompt"}`` -> ``{"count"}``);
- any server: ``/v1/models`` (the model to ask for).

A page an engine lacks is no error: its facts stay ``None`` (a replay then
counts prompts with the policy's own counter). Needs ``slopolicy[openai,prometheus]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from slopolicy.errors import UsageError

if TYPE_CHECKING:
    import httpx
    from openai import AsyncOpenAI

__all__ = ("EngineFacts", "Target", "check_url", "fresh_connections_client")

_CACHE_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def check_url(url: str) -> str:
    """``url`` without a trailing ``/`` (nor ``/v1``); :class:`UsageError` unless http(s)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--target {url!r}: give the server's http(s) URL, e.g. http://host:8000")
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


@dataclass(frozen=True, slots=True)
class EngineFacts:
    """What the engine reports about itself (``None``: it does not say).

    Attributes:
        kind: ``llama.cpp``, ``vllm`` or ``openai`` (any other server).
        model: the model id to send (the first of ``/v1/models``).
        slots: requests it runs at once (llama.cpp ``-np``).
        slot_context: the longest prompt plus output one request may hold, in tokens.
        kv_tokens: its KV cache, in tokens.
        tokenizes: whether ``/tokenize`` answers.
    """

    kind: str
    model: str
    slots: int | None = None
    slot_context: int | None = None
    kv_tokens: int | None = None
    tokenizes: bool = False

    def extra_body(self) -> dict[str, Any]:
        """What every replayed request adds to its body: run to ``max_tokens``
        (``ignore_eos``; vLLM and llama.cpp honour it) and, on llama.cpp,
        compute each prompt afresh (``cache_prompt``: a slot keeps its last prompt)."""
        body: dict[str, Any] = {"ignore_eos": True}
        if self.kind == "llama.cpp":
            body["cache_prompt"] = False
        return body


class Target:
    """An HTTP client of one engine (``async with Target(url) as target``).

    Args:
        url: the server's base URL (its OpenAI API under ``/v1``).
        timeout: seconds for each page and each probe request.
        api_key: sent as the bearer token (``-``: none needed).
    """

    def __init__(self, url: str, *, timeout: float = 60.0, api_key: str = "-") -> None:
        self.url = check_url(url)
        self.timeout = timeout
        self.api_key = api_key
        self._http: httpx.AsyncClient | None = None
        self._tokenize_key: str | None = None

    async def __aenter__(self) -> Target:
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"}
        self._http = httpx.AsyncClient(base_url=self.url, timeout=self.timeout, headers=headers)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            raise UsageError("use the target inside `async with`")
        return self._http

    async def _json(self, method: str, path: str, body: object = None) -> Any:
        """The page's JSON, or ``None`` when it is missing, failing or not JSON."""
        import httpx

        try:
            answer = await self.http.request(method, path, json=body)
        except httpx.HTTPError:
            return None
        if answer.status_code != 200:
            return None
        try:
            return answer.json()
        except ValueError:
            return None

    async def facts(self) -> EngineFacts:
        """Read the engine's pages; :class:`UsageError` when ``/v1/models`` does not answer."""
        models = await self._json("GET", "/v1/models")
        data = models.get("data") if isinstance(models, dict) else None
        if not isinstance(data, list) or not data or not isinstance(data[0], dict):
            raise UsageError(f"--target {self.url}: no OpenAI-compatible /v1/models answered")
        model = str(data[0].get("id"))
        owner = data[0].get("owned_by")
        props = await self._json("GET", "/props")
        tokenizes = await self.count("the") is not None
        if isinstance(props, dict) and isinstance(props.get("total_slots"), int):
            slots = int(props["total_slots"])
            settings = props.get("default_generation_settings") or {}
            context = settings.get("n_ctx") if isinstance(settings, dict) else None
            per_slot = context if isinstance(context, int) and context > 0 else None
            kv = None if per_slot is None else per_slot * slots
            return EngineFacts("llama.cpp", model, slots, per_slot, kv, tokenizes)
        kv, length = await self._vllm_cache(), _max_model_len(data[0])
        kind = "vllm" if owner == "vllm" or kv is not None else "openai"
        return EngineFacts(kind, model, None, length, kv, tokenizes)

    async def _vllm_cache(self) -> int | None:
        import httpx

        try:
            answer = await self.http.get("/metrics")
        except httpx.HTTPError:
            return None
        found = _CACHE_INFO.search(answer.text) if answer.status_code == 200 else None
        if found is None:
            return None
        labels = dict(_LABEL.findall(found.group("labels")))
        try:
            return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
        except (KeyError, ValueError):
            return None

    async def count(self, text: str) -> int | None:
        """Tokens ``/tokenize`` counts in ``text`` (llama.cpp's count leaves
        out the BOS a request adds), or ``None`` where it does not answer."""
        answer = await self._json("POST", "/tokenize", {"content": text, "prompt": text})
        if not isinstance(answer, dict):
            return None
        if isinstance(answer.get("count"), int):
            return int(answer["count"])
        tokens = answer.get("tokens")
        return len(tokens) if isinstance(tokens, list) else None

    async def prompt_offset(self, facts: EngineFacts) -> int:
        """Tokens a request adds to what :meth:`count` counts (llama.cpp's
        BOS): one short request's ``usage.prompt_tokens`` minus the count."""
        text = "the of and to in"
        counted = await self.count(text)
        async with self.openai_client() as client:
            answer = await client.completions.create(
                model=facts.model, prompt=text, max_tokens=1, extra_body=facts.extra_body()
            )
        used = getattr(answer.usage, "prompt_tokens", None)
        if not isinstance(used, int) or counted is None:
            return 0
        return max(0, used - counted)

    async def fresh_slot_order(self, facts: EngineFacts) -> None:
        """On llama.cpp, put the slots in a fresh server's order of use: one
        one-token request pinned to each slot (``id_slot``), the highest
        first, so the next requests take the slots from the highest index
        down, as on a server just started (and as the simulator's engine
        model starts); elsewhere nothing.

        llama-server gives a request its least recently released free slot
        and batches prompts in slot-index order: a chat turn in a slot below
        a long prompt's is computed first, one above it waits for the whole
        prefill. Which of the two happens depends on the slots' history (a
        calibration, the replay before), which a simulated replay does not
        have. A server that refuses a pinned request is left as it is."""
        if facts.kind != "llama.cpp" or not facts.slots:
            return
        import openai

        body = facts.extra_body()
        async with self.openai_client() as client:
            for slot in reversed(range(facts.slots)):
                try:
                    await client.completions.create(
                        model=facts.model,
                        prompt="the",
                        max_tokens=1,
                        extra_body=body | {"id_slot": slot},
                    )
                except openai.APIError:  # a server without id_slot: the replay goes on as it is
                    return

    def openai_client(self, **options: Any) -> AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` for the target's ``/v1`` (see
        :func:`fresh_connections_client`) that never retries by itself."""
        options.setdefault("max_retries", 0)
        return fresh_connections_client(f"{self.url}/v1", self.api_key, **options)


def fresh_connections_client(base_url: str, api_key: str, **options: Any) -> AsyncOpenAI:
    """An ``openai.AsyncOpenAI`` that opens a connection per request instead
    of reusing idle ones (``options`` go to the client): llama-server may be
    closing the idle one (see :meth:`slopolicy.testing.llama.LlamaServer.openai_client`)."""
    import openai
    from openai._constants import DEFAULT_CONNECTION_LIMITS as limits

    no_reuse = type(limits)(max_connections=limits.max_connections, max_keepalive_connections=0)
    options.setdefault("http_client", openai.DefaultAsyncHttpxClient(limits=no_reuse))
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, **options)


def _max_model_len(model: dict[str, Any]) -> int | None:
    value = model.get("max_model_len")
    return value if isinstance(value, int) and value > 0 else None
