"""What the engine and the tools report, with explicit staleness.

:class:`EngineSignals` is one report; every number is optional because
engines expose different metrics. :class:`SignalBoard` keeps the latest value
of each field with its own observation time (engine metrics and tool
statistics arrive from different scrapers) and answers a field as ``None``
once it is older than ``max_age``: **a stale number is unknown, never
healthy**, so a consumer cannot read an old "KV 40%" scraped before the engine
filled up. Consumers must treat ``None`` as "no evidence", neither good nor bad.

:class:`DecodeBaseline` learns what decode speed is normal *at similar load*,
so "decode tokens/s falling while the load is the same" becomes a number: the
fractional drop the fallback ladder's ``decode_tps_drop`` trigger consumes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from slopolicy.core.checks import MAX_AMOUNT, MAX_COUNT, check_now, check_time, is_number, shown
from slopolicy.errors import UsageError

__all__ = ("SIGNAL_FIELDS", "DecodeBaseline", "EngineSignals", "SignalBoard", "check_signals")

#: The fields of :class:`EngineSignals` that carry a signal (all but ``observed_at``).
SIGNAL_FIELDS = (
    "kv_usage",
    "waiting",
    "running",
    "decode_tps",
    "tool_timeout_rate",
    "preemption_rate",
    "kv_capacity_tokens",
)


@dataclass(frozen=True, slots=True)
class EngineSignals:
    """One report, observed at ``observed_at`` (monotonic seconds).

    Attributes:
        kv_usage: fraction of the KV cache in use, 0-1.
        waiting: requests waiting inside the engine.
        running: requests the engine is decoding.
        decode_tps: decode tokens per second, whole engine.
        tool_timeout_rate: fraction of tool/retriever calls timing out, 0-1.
        preemption_rate: requests the engine preempted per second, whole
            engine (it ran out of KV blocks and evicted running requests, to
            compute them again later; vLLM's ``vllm:num_preemptions_total``,
            SGLang's retractions).
        kv_capacity_tokens: the engine's whole KV pool, in tokens (vLLM's
            ``vllm:cache_config_info``: ``num_gpu_blocks x block_size``): the
            policy's ledger counts it, at most ``kv.num_blocks`` where the
            config sets that (:meth:`KVReservation.observe_capacity
            <slopolicy.KVReservation.observe_capacity>`).
    """

    observed_at: float
    kv_usage: float | None = None
    waiting: int | None = None
    running: int | None = None
    decode_tps: float | None = None
    tool_timeout_rate: float | None = None
    # Keyword-only: six numbers in a row that swap silently are enough.
    preemption_rate: float | None = field(default=None, kw_only=True)
    kv_capacity_tokens: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        check_time("observed_at", self.observed_at)
        for name in ("kv_usage", "tool_timeout_rate"):
            value = getattr(self, name)
            if value is not None and not (is_number(value) and 0 <= value <= 1):
                raise UsageError(f"{name} must be in [0, 1], got {shown(value)}")
        for name in ("waiting", "running"):
            value = getattr(self, name)
            if value is not None and not (is_number(value) and 0 <= value <= MAX_AMOUNT):
                raise UsageError(f"{name} must be >= 0, got {shown(value)}")
        tokens = self.kv_capacity_tokens
        if tokens is not None and not (
            isinstance(tokens, int) and not isinstance(tokens, bool) and 1 <= tokens <= MAX_COUNT
        ):
            raise UsageError(
                f"kv_capacity_tokens must be an integer from 1 to 2**53, got {shown(tokens)}"
            )
        for name in ("decode_tps", "preemption_rate"):
            value = getattr(self, name)
            if value is not None and not (is_number(value) and 0 <= value <= MAX_AMOUNT):
                raise UsageError(f"{name} must be a finite number >= 0, got {shown(value)}")

    def age(self, *, now: float) -> float:
        """Seconds since the observation (0 if ``now`` is earlier)."""
        check_now(now)
        return max(0.0, now - self.observed_at)

    def is_stale(self, *, now: float, max_age: float) -> bool:
        """Whether the report is older than ``max_age`` seconds at ``now``."""
        return self.age(now=now) > max_age

    @property
    def empty(self) -> bool:
        """Whether no field is known."""
        return all(getattr(self, name) is None for name in SIGNAL_FIELDS)


def check_signals(value: object) -> EngineSignals:
    """``value`` if it is an :class:`EngineSignals`; raises :class:`UsageError` otherwise."""
    if not isinstance(value, EngineSignals):
        raise UsageError(f"expected EngineSignals, got {type(value).__name__}")
    return value


class SignalBoard:
    """The latest value of each signal, answered as ``None`` once older than ``max_age``.

    Like every time-driven core object, a ``now`` earlier than one seen counts
    as the latest seen, so a late query cannot make an expired value fresh again.
    Reports may be partial: a field left ``None`` keeps its previous value and
    that value's age. A report older than the value already held for a field
    does not overwrite it (scrapes can arrive out of order).
    """

    __slots__ = ("_latest", "_times", "_values", "max_age")

    def __init__(self, max_age: float = 10.0) -> None:
        if not (math.isfinite(max_age) and max_age > 0):
            raise UsageError(f"max_age must be a finite number of seconds > 0, got {max_age!r}")
        self.max_age = max_age
        self._values: dict[str, float] = {}
        self._times: dict[str, float] = {}
        self._latest = -math.inf

    def update(self, signals: EngineSignals) -> None:
        """Take the fields ``signals`` reports that are newer than those held."""
        for name in SIGNAL_FIELDS:
            value = getattr(signals, name)
            if value is not None and signals.observed_at >= self._times.get(name, -math.inf):
                self._values[name] = value
                self._times[name] = signals.observed_at

    def current(self, *, now: float) -> EngineSignals:
        """The fresh fields at ``now``; stale or never-reported ones are ``None``.

        ``observed_at`` is the oldest fresh field's time, so ``age(now=now)`` is the
        worst age of any number returned (``now`` when none is fresh).
        """
        check_now(now)
        now = self._latest = max(now, self._latest)
        fresh = {
            name: value
            for name, value in self._values.items()
            if now - self._times[name] <= self.max_age
        }
        oldest = min((self._times[name] for name in fresh), default=now)
        waiting, running = fresh.get("waiting"), fresh.get("running")
        capacity = fresh.get("kv_capacity_tokens")
        return EngineSignals(
            observed_at=oldest,
            kv_usage=fresh.get("kv_usage"),
            waiting=None if waiting is None else int(waiting),
            running=None if running is None else int(running),
            decode_tps=fresh.get("decode_tps"),
            tool_timeout_rate=fresh.get("tool_timeout_rate"),
            preemption_rate=fresh.get("preemption_rate"),
            kv_capacity_tokens=None if capacity is None else int(capacity),
        )

    def age(self, name: str, *, now: float) -> float | None:
        """Seconds since field ``name`` was last reported, or ``None`` if never."""
        if name not in SIGNAL_FIELDS:
            raise UsageError(f"unknown signal {name!r}; signals are {', '.join(SIGNAL_FIELDS)}")
        check_now(now)
        seen = self._times.get(name)
        return None if seen is None else max(0.0, now - seen)


@dataclass(frozen=True, slots=True)
class _Band:
    per_request_tps: float
    samples: int
    at: float


class DecodeBaseline:
    """Normal decode speed per running request, learned per load band.

    Load bands are running requests in ``[2**k, 2**(k+1))`` (1, 2-3, 4-7, ...),
    so a batch of 6 is compared with batches of 4-7, not with a lone request
    that decodes far faster. Within a band the baseline is a time-weighted
    EWMA (``half_life_s``) of ``decode_tps / running``, learned **only from
    healthy samples**: those whose drop is at most ``learn_below``, so a slow
    engine does not teach the baseline that slow is normal. A band needs
    ``warmup`` samples before it answers. If a slowdown is permanent (a new
    model, new hardware), call :meth:`reset`.
    """

    __slots__ = ("_bands", "_latest", "half_life_s", "learn_below", "warmup")

    def __init__(
        self, *, half_life_s: float = 300.0, learn_below: float = 0.15, warmup: int = 3
    ) -> None:
        if not (math.isfinite(half_life_s) and half_life_s > 0):
            raise UsageError(f"half_life_s must be finite seconds > 0, got {half_life_s!r}")
        if not 0 <= learn_below <= 1 or warmup < 1:
            raise UsageError("learn_below must be in [0, 1] and warmup >= 1")
        self.half_life_s = half_life_s
        self.learn_below = learn_below
        self.warmup = warmup
        self._bands: dict[int, _Band] = {}
        self._latest = -math.inf

    def drop(self, signals: EngineSignals) -> float | None:
        """Fractional drop of per-request decode speed against the baseline at
        similar load (0 = as fast or faster, 1 = stalled), or ``None`` when
        ``decode_tps`` or ``running`` is unknown, nothing runs, or the band is
        still warming up."""
        sample = _per_request(signals)
        if sample is None:
            return None
        band = self._bands.get(sample[0])
        if band is None or band.samples < self.warmup or band.per_request_tps <= 0:
            return None
        return min(1.0, max(0.0, 1.0 - sample[1] / band.per_request_tps))

    def observe(self, signals: EngineSignals) -> float | None:
        """Learn from ``signals`` if healthy, and return its :meth:`drop` (measured
        before learning). An ``observed_at`` earlier than one seen counts as the latest."""
        sample = _per_request(signals)
        if sample is None:
            return None
        drop = self.drop(signals)
        now = max(signals.observed_at, self._latest)
        self._latest = now
        key, value = sample
        band = self._bands.get(key)
        if band is None:
            self._bands[key] = _Band(value, 1, now)
        elif band.samples < self.warmup or (drop is not None and drop <= self.learn_below):
            # Warm-up samples are all learned (there is nothing to judge them by yet).
            weight = 1.0 - 0.5 ** ((now - band.at) / self.half_life_s)
            if band.samples < self.warmup:  # plain mean while warming up
                weight = 1.0 / (band.samples + 1)
            learned = band.per_request_tps + weight * (value - band.per_request_tps)
            self._bands[key] = replace(
                band, per_request_tps=learned, samples=band.samples + 1, at=now
            )
        return drop

    def baseline(self, running: int) -> float | None:
        """The learned decode tokens/s per request for ``running`` requests, if warm."""
        band = self._bands.get(running.bit_length()) if running > 0 else None
        return band.per_request_tps if band is not None and band.samples >= self.warmup else None

    def reset(self) -> None:
        """Forget every band."""
        self._bands.clear()


def _per_request(signals: EngineSignals) -> tuple[int, float] | None:
    if signals.decode_tps is None or not signals.running:
        return None
    return signals.running.bit_length(), signals.decode_tps / signals.running
