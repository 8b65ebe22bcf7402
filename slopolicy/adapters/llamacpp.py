"""llama.cpp's ``llama-server``: engine signals from its ``/metrics`` and ``/slots``.

::

    scraper = LlamaCppScraper("http://127.0.0.1:8080")      # the server, not /metrics
    async with scraper, Gate(config, signals=scraper, poll_every=1.0) as gate:
        ...

Start the server with ``--metrics`` (``/slots`` is on by default). Each poll
fetches ``/slots`` and then ``/metrics`` and reports
:class:`~slopolicy.EngineSignals`:

- ``running``: slots processing a request (``/slots`` ``is_processing``);
- ``waiting``: ``llamacpp:requests_deferred``, requests in the server's own
  FCFS queue because every slot was busy;
- ``kv_usage`` (0-1): KV cells held by the running requests (each slot's
  ``n_prompt_tokens``: the prompt and the output so far) over the KV pool:
  the slots' ``n_ctx`` summed (``-c``), or ``kv_tokens`` for a server started
  with ``--kv-unified``, where every slot reports the whole pool;
- ``kv_capacity_tokens``: that pool, in tokens (the pool the policy's
  ledger counts: at most ``kv.num_blocks`` where the config sets that);
- ``decode_tps``: the rate of output tokens, ``llamacpp:tokens_predicted_total``
  (which llama.cpp adds to only as each request ends) plus the running
  slots' ``n_decoded``, so a long stream counts while it runs.

:attr:`LlamaCppScraper.last` keeps the rest of the last poll
(:class:`LlamaCppReading`): each slot's KV use and the prompt throughput
(the rate of ``llamacpp:prompt_tokens_total``, prompt tokens prefilled per
second, cached ones excluded).

Staleness as in :mod:`slopolicy.adapters.metrics`: a failed poll (either page)
is no update; a rate needs two polls, and starts over when the server
restarted (``/metrics``' ``Process-Start-Time-Unix`` header changed, or its
counters went back). llama-server answers both pages from its
main loop between decode steps, so a poll waits out the batch being computed
(a long prompt's chunk, up to a second on a CPU): keep ``timeout`` above it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

# It raises the ImportError naming the extra when httpx or prometheus_client is missing.
from slopolicy.adapters._metric_pages import LLAMACPP, Reading, _samples
from slopolicy.adapters.metrics import MetricsScraper, _clip
from slopolicy.core.health.signals import EngineSignals
from slopolicy.errors import UsageError

if TYPE_CHECKING:
    import httpx

__all__ = ("LlamaCppReading", "LlamaCppScraper", "SlotUse", "read_slots")

_PROMPT_TOKENS = "llamacpp:prompt_tokens_total"


@dataclass(frozen=True, slots=True)
class SlotUse:
    """One slot of ``/slots``.

    Attributes:
        id: the slot's index.
        processing: whether it is running a request.
        tokens: KV cells its sequence holds (prompt and output so far; an
            idle slot keeps its last prompt cached for reuse).
        capacity: the slot's context, ``n_ctx``, in tokens.
        decoded: output tokens of the running request (0 when idle).
        task: the server's id of the request it runs or ran last, if any.
    """

    id: int
    processing: bool
    tokens: int
    capacity: int
    decoded: int
    task: int | None

    @property
    def usage(self) -> float:
        """The share of the slot's context in use, 0-1."""
        return min(1.0, self.tokens / self.capacity)


@dataclass(frozen=True, slots=True)
class LlamaCppReading:
    """One poll of the server.

    Attributes:
        slots: every slot.
        running: slots processing a request.
        waiting: requests deferred in the server's queue (``None``: not on the page).
        kv_tokens: KV cells held by running requests.
        kv_capacity: the KV pool, in tokens.
        decode_tps: output tokens per second since the last poll (``None``: no rate yet).
        prompt_tps: prompt tokens prefilled per second since the last poll.
        predicted_total: ``llamacpp:tokens_predicted_total``, output tokens
            of the requests that ended since the server started.
        prompt_total: ``llamacpp:prompt_tokens_total``, prompt tokens
            prefilled (cached ones excluded) since the server started.
    """

    slots: tuple[SlotUse, ...]
    running: int
    waiting: int | None
    kv_tokens: int
    kv_capacity: int
    decode_tps: float | None
    prompt_tps: float | None
    predicted_total: float | None
    prompt_total: float | None

    @property
    def kv_usage(self) -> float:
        """``kv_tokens / kv_capacity``, 0-1."""
        return min(1.0, self.kv_tokens / self.kv_capacity)


def _int(entry: Mapping[str, object], key: str, default: int | None = None) -> int:
    value = entry.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"/slots: {key!r} must be an int >= 0, got {value!r}")
    return value


def _slot(entry: object) -> SlotUse:
    if not isinstance(entry, Mapping):
        raise ValueError(f"/slots: a slot must be an object, got {type(entry).__name__}")
    processing = entry.get("is_processing")
    if not isinstance(processing, bool):
        raise ValueError(f"/slots: 'is_processing' must be a bool, got {processing!r}")
    capacity = _int(entry, "n_ctx")
    if capacity < 1:
        raise ValueError("/slots: 'n_ctx' must be >= 1")
    decoded = 0
    following = entry.get("next_token")
    if processing and isinstance(following, list) and following:
        first = following[0]
        decoded = _int(first, "n_decoded", 0) if isinstance(first, Mapping) else 0
    task = entry.get("id_task")
    return SlotUse(
        id=_int(entry, "id"),
        processing=processing,
        tokens=_int(entry, "n_prompt_tokens", 0),
        capacity=capacity,
        decoded=decoded,
        task=task if isinstance(task, int) and not isinstance(task, bool) else None,
    )


def read_slots(data: object) -> tuple[SlotUse, ...]:
    """The slots in a ``/slots`` answer (parsed JSON; pure). Raises
    :class:`ValueError` for an answer of another shape."""
    if not isinstance(data, list) or not data:
        raise ValueError("/slots must be a non-empty list of slots")
    return tuple(_slot(entry) for entry in data)


class _Rate:
    """Tokens per second of a running total between polls.

    The rate starts over when the server restarted (its ``epoch``, the
    process's start time, changed, or its own ``counter`` inside the total
    went back) and when the total went back: the last poll read the two pages
    across a request's end and counted its tokens on both."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        # (total, counter, at, epoch) at the last poll with a rate's baseline.
        self._last: tuple[float, float, float, str | None] | None = None

    def update(
        self, total: float | None, counter: float | None, at: float, epoch: str | None
    ) -> float | None:
        last = self._last
        if total is None or counter is None:
            self._last = None
            return None
        if at <= (-math.inf if last is None else last[2]):
            return None
        self._last = (total, counter, at, epoch)
        if last is None or counter < last[1] or epoch != last[3] or total < last[0]:
            return None
        before, _, then, _ = last
        return (total - before) / (at - then)


class LlamaCppScraper(MetricsScraper):
    """Polls one ``llama-server`` into :class:`~slopolicy.EngineSignals`
    (call it: the Gate's ``signals=`` contract, as :class:`MetricsScraper`).

    Args:
        url: the server, e.g. ``http://127.0.0.1:8080``.
        kv_tokens: the KV pool in tokens for a server started with
            ``--kv-unified`` (its ``-c``); default: the slots' contexts summed.
        client: an ``httpx.AsyncClient`` to use (the caller closes it).
        timeout: seconds each page may take.
        clock: the gate's clock (monotonic seconds; default ``anyio.current_time``).
    """

    def __init__(
        self,
        url: str,
        *,
        kv_tokens: int | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: float = 5.0,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        if kv_tokens is not None and (
            isinstance(kv_tokens, bool) or not isinstance(kv_tokens, int) or kv_tokens < 1
        ):
            raise UsageError(f"kv_tokens must be an int >= 1, got {kv_tokens!r}")
        base = url.rstrip("/")
        super().__init__(
            f"{base}/metrics",
            engine=LLAMACPP,
            client=client,
            timeout=timeout,
            clock=clock,
        )
        self.base_url = base
        self.kv_tokens = kv_tokens
        self.last: LlamaCppReading | None = None
        self._slots: tuple[SlotUse, ...] = ()
        self._prompt_total: float | None = None
        self._epoch: str | None = None
        self._decoded = _Rate()
        self._prompted = _Rate()

    async def _fetch(self) -> str:
        # /slots first: a request shown released is then in /metrics' counters.
        slots, _ = await self._get(f"{self.base_url}/slots")
        self._slots = read_slots(json.loads(slots))
        text, headers = await self._get(self.url)
        self._epoch = headers.get("process-start-time-unix")
        prompt = _samples(text, frozenset({_PROMPT_TOKENS}), {}, 0.0, float("inf"))
        self._prompt_total = prompt[_PROMPT_TOKENS][0] if _PROMPT_TOKENS in prompt else None
        return text

    def _signals(self, reading: Reading, at: float) -> EngineSignals | None:
        slots = self._slots
        running = [slot for slot in slots if slot.processing]
        capacity = self.kv_tokens or sum(slot.capacity for slot in slots)
        finished, prompted, epoch = reading.generated_tokens, self._prompt_total, self._epoch
        total = None if finished is None else finished + sum(slot.decoded for slot in running)
        waiting = _clip(reading.waiting)
        self.last = LlamaCppReading(
            slots=slots,
            running=len(running),
            waiting=None if waiting is None else round(waiting),
            kv_tokens=sum(slot.tokens for slot in running),
            kv_capacity=capacity,
            decode_tps=self._decoded.update(total, finished, at, epoch),
            prompt_tps=self._prompted.update(prompted, prompted, at, epoch),
            predicted_total=finished,
            prompt_total=prompted,
        )
        return EngineSignals(
            observed_at=at,
            kv_usage=self.last.kv_usage,
            waiting=self.last.waiting,
            running=self.last.running,
            decode_tps=self.last.decode_tps,
            kv_capacity_tokens=capacity,
        )

    async def __aenter__(self) -> LlamaCppScraper:
        return self
