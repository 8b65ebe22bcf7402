"""Reading one Prometheus exposition page into an engine's signals: which
samples carry each signal, per engine, and the pure parse (no I/O, no state).

Used by :mod:`slopolicy.adapters.metrics` (import that module: it checks the
``prometheus`` extra is installed), which re-exports the public names.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

from prometheus_client.parser import text_string_to_metric_families

__all__ = (
    "ENGINES",
    "SGLANG",
    "TGI",
    "TRTLLM",
    "VLLM",
    "MetricNames",
    "Reading",
    "parse",
    "read_page",
)


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
        preemptions: counters of requests the engine preempted (evicted to
            free KV blocks); ``preemption_rate`` is their rate.
        kv_capacity: gauges of the KV pool in tokens, or info series whose
            ``num_gpu_blocks`` and ``block_size`` labels multiply to it
            (:data:`POOL_INFO`); several series (engines) add up.
    """

    engine: str
    waiting: tuple[str, ...] = ()
    running: tuple[str, ...] = ()
    kv_usage: tuple[str, ...] = ()
    generated_tokens: tuple[str, ...] = ()
    decode_tps: tuple[str, ...] = ()
    preemptions: tuple[str, ...] = ()
    kv_capacity: tuple[str, ...] = ()

    def names(self) -> frozenset[str]:
        """Every sample name this engine's signals may come from."""
        groups: list[tuple[str, ...]] = [
            getattr(self, field.name) for field in fields(self) if field.name != "engine"
        ]
        return frozenset(name for group in groups for name in group)


VLLM = MetricNames(
    "vllm",
    waiting=("vllm:num_requests_waiting",),
    running=("vllm:num_requests_running",),
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    generated_tokens=("vllm:generation_tokens_total",),
    preemptions=("vllm:num_preemptions_total",),
    kv_capacity=("vllm:cache_config_info",),
)
SGLANG = MetricNames(
    "sglang",
    waiting=("sglang:num_queue_reqs",),
    running=("sglang:num_running_reqs",),
    kv_usage=("sglang:token_usage",),
    generated_tokens=("sglang:generation_tokens_total",),
    decode_tps=("sglang:gen_throughput",),
    # The counter; ``sglang:num_retracted_reqs`` is the last batch's gauge.
    preemptions=("sglang:num_retracted_requests_total",),
    kv_capacity=("sglang:max_total_num_tokens",),
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
LLAMACPP = MetricNames(
    "llamacpp",
    waiting=("llamacpp:requests_deferred",),
    running=("llamacpp:requests_processing",),
    # Added to as each request ends (its slot is released).
    generated_tokens=("llamacpp:tokens_predicted_total",),
)

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
    preemptions: float | None = None
    kv_capacity: float | None = None

    @property
    def empty(self) -> bool:
        """Whether the page carried none of the signals."""
        return all(getattr(self, field.name) is None for field in fields(self))


Samples = dict[str, list[float]]

#: Info series that carry the KV pool in their labels (value 1): vLLM's
#: ``vllm:cache_config_info{num_gpu_blocks,block_size}``.
POOL_INFO = frozenset({"vllm:cache_config_info"})


def _pool(labels: Mapping[str, str]) -> float | None:
    """The pool an info series' labels give, in tokens (``None`` unless both
    counts are integers > 0)."""
    try:
        blocks, size = int(labels["num_gpu_blocks"]), int(labels["block_size"])
    except (KeyError, ValueError):
        return None
    return float(blocks * size) if blocks > 0 and size > 0 else None


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
                if sample.name in POOL_INFO:
                    pool = _pool(sample.labels)
                    if pool is None:
                        continue
                    value = pool
                else:
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
        preemptions=_sum(_first(found, names.preemptions)),
        kv_capacity=_sum(_first(found, names.kv_capacity)),
    )


_ANY_ENGINE = frozenset(name for names in ENGINES.values() for name in names.names())


def _detect(found: Samples) -> MetricNames | None:
    """The engine whose names the page carries most of."""
    scores = {names.engine: len(names.names() & found.keys()) for names in ENGINES.values()}
    best = max(scores, key=lambda engine: scores[engine])
    return ENGINES[best] if scores[best] else None


def parse(
    text: str, names: MetricNames | None, labels: Mapping[str, str], now: float, max_age: float
) -> tuple[MetricNames, Reading] | None:
    """The page's engine (``names``, or detected) and reading; ``None`` for a
    page naming no engine we know. One parse, run off the event loop."""
    found = _samples(text, _ANY_ENGINE if names is None else names.names(), labels, now, max_age)
    names = names or _detect(found)
    return None if names is None else (names, _reading(found, names))
