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
- ``preemption_rate``: the rate of ``vllm:num_preemptions_total``,
  ``sglang:num_retracted_requests_total`` (TGI, TRT-LLM, llama.cpp: none);
- ``kv_capacity_tokens``: the KV pool, ``num_gpu_blocks x block_size`` of
  ``vllm:cache_config_info``, or ``sglang:max_total_num_tokens`` (TGI,
  TRT-LLM, llama.cpp: none): the pool the policy's ledger counts (at most
  ``kv.num_blocks`` where the config sets that);
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
from collections.abc import Callable, Mapping
from types import TracebackType

import anyio
import anyio.to_thread

try:
    import httpx
    import prometheus_client.parser  # noqa: F401  (the page parser's; checked here)
except ImportError as error:  # tests hide the packages to check this message
    raise ImportError(
        "slopolicy.adapters.metrics needs httpx and prometheus_client: "
        "pip install 'slopolicy[prometheus]'"
    ) from error

from slopolicy.adapters._metric_pages import ENGINES as ENGINES
from slopolicy.adapters._metric_pages import LLAMACPP as LLAMACPP
from slopolicy.adapters._metric_pages import SGLANG as SGLANG
from slopolicy.adapters._metric_pages import TGI as TGI
from slopolicy.adapters._metric_pages import TRTLLM as TRTLLM
from slopolicy.adapters._metric_pages import VLLM as VLLM
from slopolicy.adapters._metric_pages import MetricNames as MetricNames
from slopolicy.adapters._metric_pages import Reading as Reading
from slopolicy.adapters._metric_pages import parse
from slopolicy.adapters._metric_pages import read_page as read_page
from slopolicy.core.checks import MAX_COUNT
from slopolicy.core.health.signals import EngineSignals
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


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _clip(value: float | None, high: float | None = None) -> float | None:
    if value is None:
        return None
    value = max(0.0, value)
    return value if high is None else min(high, value)


def _pool_tokens(value: float | None) -> int | None:
    """A KV pool reading as whole tokens (``None`` unless at least one)."""
    if value is None or not 1 <= value <= MAX_COUNT:
        return None
    return int(value)


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
        self._counters: dict[str, tuple[float, float]] = {}  # name: (count, at)
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
                parse,
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

    async def _get(self, url: str) -> tuple[str, httpx.Headers]:
        """One page from the engine and its headers, read up to
        ``max_page_bytes`` (Prometheus' text format and JSON are UTF-8; bytes
        that are not are read as replacement characters); raises
        ``httpx.HTTPError`` for a non-2xx answer."""
        if self._client is None:
            self._client = httpx.AsyncClient()
        limit = self.max_page_bytes
        async with self._client.stream("GET", url, timeout=self._timeout) as response:
            response.raise_for_status()
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > limit:
                    raise ValueError(f"the page is larger than max_page_bytes ({limit} bytes)")
            headers = response.headers
        return body.decode("utf-8", errors="replace"), headers

    async def _fetch(self) -> str:
        return (await self._get(self.url))[0]

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
            preemption_rate=self._rate("preemptions", reading.preemptions, at),
            kv_capacity_tokens=_pool_tokens(reading.kv_capacity),
        )

    def _decode_tps(self, reading: Reading, at: float) -> float | None:
        rate = self._rate("generated_tokens", reading.generated_tokens, at)
        return rate if rate is not None else _clip(reading.decode_tps)

    def _rate(self, counter: str, count: float | None, at: float) -> float | None:
        """``counter``'s growth per second since the last scrape; ``None`` for
        the first one, after a counter reset (the engine restarted) or
        without the counter."""
        previous = self._counters.pop(counter, None)
        if count is None:
            return None
        self._counters[counter] = (count, at)
        if previous is None:
            return None
        before, then = previous
        if count < before or at <= then:
            return None
        rate = (count - before) / (at - then)
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
