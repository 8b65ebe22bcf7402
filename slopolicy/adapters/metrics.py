"""Engine signals from an engine's Prometheus ``/metrics``: a ``signals=`` source for the Gate.

::

    scraper = MetricsScraper("http://vllm:8000/metrics")          # engine="auto"
    async with scraper, Gate(config, signals=scraper, poll_every=1.0) as gate:
        ...

Each poll fetches the page with httpx, parses it with
``prometheus_client.parser.text_string_to_metric_families`` and reports
:class:`~slopolicy.EngineSignals`:

- ``waiting``: ``vllm:num_requests_waiting``, ``sglang:num_queue_reqs``,
  ``trtllm_num_requests_waiting``, ``tgi_queue_size``;
- ``running``: ``vllm:num_requests_running``, ``sglang:num_running_reqs``,
  ``tgi_batch_current_size`` (TRT-LLM: none);
- ``kv_usage`` (0-1): ``vllm:kv_cache_usage_perc`` (older vLLM:
  ``vllm:gpu_cache_usage_perc``), ``sglang:token_usage``,
  ``trtllm_kv_cache_utilization`` (TGI: none);
- ``decode_tps``: the rate of ``vllm:generation_tokens_total``,
  ``sglang:generation_tokens_total`` (else the gauge ``sglang:gen_throughput``),
  ``tgi_request_generated_tokens_sum`` (TRT-LLM: none).

Several series of one metric (vLLM's ``engine`` label under data parallelism)
add up for ``waiting``, ``running`` and the token counters; ``kv_usage`` is the
fullest series (preemption starts in the fullest engine). ``labels`` keeps
only series carrying those label values (one model of several).

Staleness, so the policy never reads an old number as a fresh one:

- a metric missing from the page is ``None`` (unknown), never 0;
- a sample with an exposition timestamp older than ``max_sample_age`` seconds
  (wall clock) is treated as missing;
- a failed scrape (connection error, timeout, non-2xx, unparsable page, a
  page over ``max_page_bytes``) returns ``None``: no update, so the gate's
  ``SignalBoard`` lets the last values age out after ``ladder.signal_max_age_s``;
- a rate needs two scrapes; the first after a start or a counter reset
  (the engine restarted) has no ``decode_tps``;
- a value that is not a finite number (``NaN``, ``+Inf``, a sum or rate too
  large for a float) is missing, and counts are clipped at 0 (KV usage at 1).

The page is parsed in a worker thread: a large page (vLLM's histograms, many
engines or adapters) costs the event loop nothing.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType

import anyio
import anyio.to_thread

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

#: The engines ``engine="auto"`` chooses among, by name.
ENGINES: Mapping[str, MetricNames] = {names.engine: names for names in (VLLM, SGLANG, TRTLLM, TGI)}


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
            try:
                value = float(sample.value)  # an int when the page wrote an integer
            except OverflowError:
                continue
            if math.isfinite(value):
                found.setdefault(sample.name, []).append(value)
    return found


def _first(found: Samples, names: Iterable[str]) -> list[float] | None:
    for name in names:
        if name in found:
            return found[name]
    return None


def _sum(values: list[float] | None) -> float | None:
    if values is None:
        return None
    try:
        return math.fsum(values)
    except OverflowError:  # finite samples whose sum is not
        return None


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
    return _reading(_samples(text, names.names(), labels or {}, wall, max_sample_age), names)


def _reading(found: Samples, names: MetricNames) -> Reading:
    kv = _first(found, names.kv_usage)
    return Reading(
        waiting=_sum(_first(found, names.waiting)),
        running=_sum(_first(found, names.running)),
        kv_usage=None if kv is None else max(kv),
        generated_tokens=_sum(_first(found, names.generated_tokens)),
        decode_tps=_sum(_first(found, names.decode_tps)),
    )


_ANY_ENGINE = frozenset(name for names in ENGINES.values() for name in names.names())


def _detect(found: Samples) -> MetricNames | None:
    """The engine whose names the page carries most of."""
    scores = {names.engine: len(names.names() & found.keys()) for names in ENGINES.values()}
    best = max(scores, key=lambda engine: scores[engine])
    return ENGINES[best] if scores[best] else None


def _parse(
    text: str, names: MetricNames | None, labels: Mapping[str, str], now: float, max_age: float
) -> tuple[MetricNames, Reading] | None:
    """The page's engine (``names``, or detected) and reading; ``None`` for a
    page naming no engine we know. One parse, run off the event loop."""
    found = _samples(text, _ANY_ENGINE if names is None else names.names(), labels, now, max_age)
    names = names or _detect(found)
    return None if names is None else (names, _reading(found, names))


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


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
        timeout: seconds a whole scrape may take (connecting and reading the
            page); keep it below ``poll_every``.
        labels: only series with these label values count.
        max_sample_age: seconds after which a timestamped sample is stale.
        max_page_bytes: a larger page is a failed scrape (bytes, decompressed).
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
        max_page_bytes: int = 8 * 2**20,
        clock: Callable[[], float] = anyio.current_time,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(engine, MetricNames) and (engine != "auto" and engine not in ENGINES):
            raise UsageError(f"engine must be 'auto', one of {sorted(ENGINES)}, or MetricNames")
        if not (_positive(timeout) and _positive(max_sample_age)):
            raise UsageError("timeout and max_sample_age must be numbers > 0 seconds")
        if isinstance(max_page_bytes, bool) or not isinstance(max_page_bytes, int):
            raise UsageError(f"max_page_bytes must be an integer, got {max_page_bytes!r}")
        if max_page_bytes < 1:
            raise UsageError(f"max_page_bytes must be >= 1, got {max_page_bytes!r}")
        try:
            parsed = httpx.URL(url)
        except (TypeError, httpx.InvalidURL) as error:
            raise UsageError(f"url must be an http(s) URL with a host, got {url!r}") from error
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise UsageError(f"url must be an http(s) URL with a host, got {url!r}")
        self.url = url
        self.names: MetricNames | None = ENGINES.get(engine) if isinstance(engine, str) else engine
        self.labels = dict(labels or {})
        self.max_sample_age = max_sample_age
        self.max_page_bytes = max_page_bytes
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
            with anyio.fail_after(self._timeout):
                text = await self._fetch()
            parsed = await anyio.to_thread.run_sync(
                _parse,
                text,
                self.names,
                self.labels,
                self._wall_clock(),
                self.max_sample_age,
                abandon_on_cancel=True,  # the gate closing need not wait for a big page
            )
        except (httpx.HTTPError, ValueError, TimeoutError) as error:
            self._failed(error)
            return None
        if parsed is None:
            return None  # not an engine page we know (yet)
        names, reading = parsed
        self.names = names
        if self.consecutive_failures:
            logger.info("scraping %s works again", self.url)
        self.consecutive_failures = 0
        return self._signals(reading, self._clock())

    async def _fetch(self) -> str:
        """The page's text, read up to ``max_page_bytes`` (Prometheus' text
        format is UTF-8; bytes that are not read as replacement characters)."""
        if self._client is None:
            self._client = httpx.AsyncClient()
        limit = self.max_page_bytes
        async with self._client.stream("GET", self.url, timeout=self._timeout) as response:
            response.raise_for_status()
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > limit:
                    raise ValueError(f"the page is larger than max_page_bytes ({limit} bytes)")
        return body.decode("utf-8", errors="replace")

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
        rate = (tokens - before) / (at - then)
        return rate if math.isfinite(rate) else None

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
