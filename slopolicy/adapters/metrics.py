"""Engine signals from an engine's Prometheus ``/metrics``: a ``signals=`` source for the Gate.

::

    scraper = MetricsScraper("http://vllm:8000/metrics")          # engine="auto"
    async with scraper, Gate(config, signals=scraper, poll_every=1.0) as gate:
        ...

Each poll fetches the page with httpx, parses it with
``prometheus_client.parser.text_string_to_metric_families`` and reports
:class:`~slopolicy.EngineSignals`:

- ``waiting``: ``vllm:num_requests_waiting``, ``sglang:num_queue_reqs``,
  ``trtllm_num_requests_waiting``, ``tgi_queue_size``, ``llamacpp:requests_deferred``;
- ``running``: ``vllm:num_requests_running``, ``sglang:num_running_reqs``,
  ``tgi_batch_current_size``, ``llamacpp:requests_processing`` (TRT-LLM: none);
- ``kv_usage`` (0-1): ``vllm:kv_cache_usage_perc`` (older vLLM:
  ``vllm:gpu_cache_usage_perc``), ``sglang:token_usage``,
  ``trtllm_kv_cache_utilization`` (TGI: none);
- ``decode_tps``: the rate of ``vllm:generation_tokens_total``,
  ``sglang:generation_tokens_total`` (else the gauge ``sglang:gen_throughput``),
  ``tgi_request_generated_tokens_sum``, ``llamacpp:tokens_predicted_total``
  (TRT-LLM: none). TGI and llama.cpp count tokens as each request ends; for
  llama.cpp, :class:`~slopolicy.adapters.llamacpp.LlamaCppScraper` adds the
  running slots' tokens and KV use from ``/slots``.

Several series of one metric (vLLM's ``engine`` label under data parallelism)
add up for ``waiting``, ``running`` and the token counters; ``kv_usage`` is the
fullest series (preemption starts in the fullest engine). ``labels`` keeps
only series carrying those label values (one model of several).

Staleness, so the policy never reads an old number as a fresh one:

- a metric missing from the page is ``None`` (unknown), never 0;
- a sample with an exposition timestamp older than ``max_sample_age`` seconds
  (wall clock) is treated as missing;
- a failed scrape (connection error, timeout, non-2xx, unparsable page)
  returns ``None``: no update, so the gate's ``SignalBoard`` lets the last
  values age out after ``ladder.signal_max_age_s``;
- a rate needs two scrapes; the first after a start or a counter reset
  (the engine restarted) has no ``decode_tps``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType

import anyio

try:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as error:  # tests hide the packages to check this message
    raise ImportError(
        "slopolicy.adapters.metrics needs httpx and prometheus_client: "
        "pip install 'slopolicy[prometheus]'"
    ) from error

from slopolicy.core.signals import EngineSignals
from slopolicy.errors import UsageError

__all__ = (
    "ENGINES",
    "LLAMACPP",
    "SGLANG",
    "TGI",
    "TRTLLM",
    "VLLM",
    "MetricNames",
    "MetricsScraper",
    "Reading",
    "read_page",
)

logger = logging.getLogger("slopolicy.adapters.metrics")


@dataclass(frozen=True, slots=True)
class MetricNames:
    """Which samples of one engine's page carry each signal; the first name
    present wins. Names are sample names: counters keep ``_total``,
    histograms have ``_sum``/``_count``.

    Attributes:
        engine: the engine's name.
        waiting: gauges of requests queued in the engine.
        running: gauges of requests being decoded.
        kv_usage: gauges of KV-cache use, 0-1.
        generated_tokens: counters of output tokens; ``decode_tps`` is their rate.
        decode_tps: gauges already in tokens per second (used without a counter).
    """

    engine: str
    waiting: tuple[str, ...] = ()
    running: tuple[str, ...] = ()
    kv_usage: tuple[str, ...] = ()
    generated_tokens: tuple[str, ...] = ()
    decode_tps: tuple[str, ...] = ()

    def names(self) -> frozenset[str]:
        """Every sample name this engine's signals may come from."""
        fields = (self.waiting, self.running, self.kv_usage, self.generated_tokens, self.decode_tps)
        return frozenset(name for group in fields for name in group)


VLLM = MetricNames(
    "vllm",
    waiting=("vllm:num_requests_waiting",),
    running=("vllm:num_requests_running",),
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    generated_tokens=("vllm:generation_tokens_total",),
)
SGLANG = MetricNames(
    "sglang",
    waiting=("sglang:num_queue_reqs",),
    running=("sglang:num_running_reqs",),
    kv_usage=("sglang:token_usage",),
    generated_tokens=("sglang:generation_tokens_total",),
    decode_tps=("sglang:gen_throughput",),
)
TRTLLM = MetricNames(
    "trtllm",
    waiting=("trtllm_num_requests_waiting",),
    kv_usage=("trtllm_kv_cache_utilization",),
)
TGI = MetricNames(
    "tgi",
    waiting=("tgi_queue_size",),
    running=("tgi_batch_current_size",),
    # Recorded as each request ends: a lumpy rate, but the only token count TGI exports.
    generated_tokens=("tgi_request_generated_tokens_sum",),
)

LLAMACPP = MetricNames(
    "llamacpp",
    waiting=("llamacpp:requests_deferred",),
    running=("llamacpp:requests_processing",),
    # Added to as each request ends (its slot is released).
    generated_tokens=("llamacpp:tokens_predicted_total",),
)

#: The engines ``engine="auto"`` chooses among, by name.
ENGINES: Mapping[str, MetricNames] = {
    names.engine: names for names in (VLLM, SGLANG, TRTLLM, TGI, LLAMACPP)
}


@dataclass(frozen=True, slots=True)
class Reading:
    """What one page says; ``None`` where the page says nothing (fresh)."""

    waiting: float | None
    running: float | None
    kv_usage: float | None
    generated_tokens: float | None
    decode_tps: float | None

    @property
    def empty(self) -> bool:
        """Whether the page carried none of the signals."""
        return all(
            value is None
            for value in (
                self.waiting,
                self.running,
                self.kv_usage,
                self.generated_tokens,
                self.decode_tps,
            )
        )


Samples = dict[str, list[float]]


def _samples(
    text: str, wanted: frozenset[str], labels: Mapping[str, str], now: float, max_age: float
) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in wanted:
                continue
            if any(sample.labels.get(key) != value for key, value in labels.items()):
                continue
            if sample.timestamp is not None and now - float(sample.timestamp) > max_age:
                continue  # an exporter's cached value: as good as missing
            if math.isfinite(sample.value):
                found.setdefault(sample.name, []).append(float(sample.value))
    return found


def _first(found: Samples, names: Iterable[str]) -> list[float] | None:
    for name in names:
        if name in found:
            return found[name]
    return None


def _sum(values: list[float] | None) -> float | None:
    return None if values is None else math.fsum(values)


def read_page(
    text: str,
    names: MetricNames,
    *,
    labels: Mapping[str, str] | None = None,
    now: float | None = None,
    max_sample_age: float = 60.0,
) -> Reading:
    """Read one exposition page (pure: no I/O, no state).

    ``now`` is wall-clock seconds (what exposition timestamps are in);
    ``None`` reads :func:`time.time`. Raises :class:`ValueError` for a page
    the parser rejects.
    """
    wall = time.time() if now is None else now
    found = _samples(text, names.names(), labels or {}, wall, max_sample_age)
    kv = _first(found, names.kv_usage)
    return Reading(
        waiting=_sum(_first(found, names.waiting)),
        running=_sum(_first(found, names.running)),
        kv_usage=None if kv is None else max(kv),
        generated_tokens=_sum(_first(found, names.generated_tokens)),
        decode_tps=_sum(_first(found, names.decode_tps)),
    )


def _detect(text: str) -> MetricNames | None:
    """The engine whose names the page carries most of."""
    present = {
        sample.name for family in text_string_to_metric_families(text) for sample in family.samples
    }
    scores = {names.engine: len(names.names() & present) for names in ENGINES.values()}
    best = max(scores, key=lambda engine: scores[engine])
    return ENGINES[best] if scores[best] else None


def _clip(value: float | None, high: float | None = None) -> float | None:
    if value is None:
        return None
    value = max(0.0, value)
    return value if high is None else min(high, value)


class MetricsScraper:
    """Polls one engine's ``/metrics`` into :class:`~slopolicy.EngineSignals`.

    Call it (``await scraper()``) for the latest signals, or ``None`` when
    there is nothing new (a failed scrape, or a page with none of the
    signals); that is the Gate's ``signals=`` contract.

    Args:
        url: the metrics page, e.g. ``http://vllm:8000/metrics``.
        engine: ``"auto"`` (chosen from the first page that names one),
            a name in :data:`ENGINES`, or your own :class:`MetricNames`.
        client: an ``httpx.AsyncClient`` to use (the caller closes it);
            by default the scraper makes one and closes it in :meth:`aclose`.
        timeout: seconds a scrape may take; keep it below ``poll_every``.
        labels: only series with these label values count.
        max_sample_age: seconds after which a timestamped sample is stale.
        clock: the gate's clock for ``observed_at`` and rates (monotonic
            seconds; default ``anyio.current_time``).
        wall_clock: wall-clock seconds, for exposition timestamps.
    """

    def __init__(
        self,
        url: str,
        *,
        engine: str | MetricNames = "auto",
        client: httpx.AsyncClient | None = None,
        timeout: float = 2.0,
        labels: Mapping[str, str] | None = None,
        max_sample_age: float = 60.0,
        clock: Callable[[], float] = anyio.current_time,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(engine, str) and engine != "auto" and engine not in ENGINES:
            raise UsageError(f"engine must be 'auto', one of {sorted(ENGINES)}, or MetricNames")
        if not (timeout > 0 and max_sample_age > 0):
            raise UsageError("timeout and max_sample_age must be > 0 seconds")
        self.url = url
        self.names: MetricNames | None = ENGINES.get(engine) if isinstance(engine, str) else engine
        self.labels = dict(labels or {})
        self.max_sample_age = max_sample_age
        self._timeout = timeout
        self._client = client
        self._owns_client = client is None
        self._clock = clock
        self._wall_clock = wall_clock
        self._counter: tuple[float, float] | None = None  # (tokens, at)
        self.scrapes = 0
        self.failures = 0
        self.consecutive_failures = 0
        self.last_error: str | None = None

    async def __call__(self) -> EngineSignals | None:
        """Scrape once: the signals, or ``None`` for no update."""
        self.scrapes += 1
        try:
            text = await self._fetch()
            names = self.names or _detect(text)
            if names is None:
                return None  # not an engine page we know (yet)
            reading = read_page(
                text,
                names,
                labels=self.labels,
                now=self._wall_clock(),
                max_sample_age=self.max_sample_age,
            )
        except (httpx.HTTPError, ValueError) as error:
            self._failed(error)
            return None
        self.names = names
        if self.consecutive_failures:
            logger.info("scraping %s works again", self.url)
        self.consecutive_failures = 0
        return self._signals(reading, self._clock())

    async def _get(self, url: str) -> httpx.Response:
        """One page from the engine; raises ``httpx.HTTPError`` for a non-2xx answer."""
        if self._client is None:
            self._client = httpx.AsyncClient()
        response = await self._client.get(url, timeout=self._timeout)
        response.raise_for_status()
        return response

    async def _fetch(self) -> str:
        return (await self._get(self.url)).text

    def _failed(self, error: Exception) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        self.last_error = f"{type(error).__name__}: {error}"
        # Once per outage: the poll repeats every second or so.
        log = logger.warning if self.consecutive_failures == 1 else logger.debug
        log("scraping %s failed (%s); its signals will go stale", self.url, self.last_error)

    def _signals(self, reading: Reading, at: float) -> EngineSignals | None:
        if reading.empty:
            return None
        waiting, running = _clip(reading.waiting), _clip(reading.running)
        return EngineSignals(
            observed_at=at,
            kv_usage=_clip(reading.kv_usage, 1.0),
            waiting=None if waiting is None else round(waiting),
            running=None if running is None else round(running),
            decode_tps=self._decode_tps(reading, at),
        )

    def _decode_tps(self, reading: Reading, at: float) -> float | None:
        rate = self._rate(reading.generated_tokens, at)
        return rate if rate is not None else _clip(reading.decode_tps)

    def _rate(self, tokens: float | None, at: float) -> float | None:
        """Tokens per second since the last scrape; ``None`` for the first one,
        after a counter reset (the engine restarted) or without a counter."""
        previous = self._counter
        self._counter = None if tokens is None else (tokens, at)
        if tokens is None or previous is None:
            return None
        before, then = previous
        if tokens < before or at <= then:
            return None
        return (tokens - before) / (at - then)

    async def aclose(self) -> None:
        """Close the HTTP client if the scraper made it."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> MetricsScraper:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
