"""Arrival processes: when requests arrive, in seconds.

Each process draws its arrival times in ``[start, end)`` from a
``random.Random`` the caller seeds, so a workload is reproducible. They
compose: a stream has one process, and streams are merged on one timeline.

| process | arrivals |
|---|---|
| :class:`Poisson` | exponential gaps at ``rate`` per second |
| :class:`GammaArrivals` | gamma gaps with coefficient of variation ``cv`` (> 1: bursty) |
| :class:`OnOff` | Poisson at ``rate`` while on, nothing while off, alternating |
| :class:`Ramp` | Poisson whose rate moves linearly from ``start_rate`` to ``end_rate`` |
| :class:`Burst` | ``count`` arrivals at once, spread evenly over ``spread`` seconds |
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Protocol

from slopolicy.errors import UsageError

__all__ = ("ArrivalProcess", "Burst", "GammaArrivals", "OnOff", "Poisson", "Ramp")


class ArrivalProcess(Protocol):
    """Anything that draws arrival times."""

    def times(self, rng: random.Random, start: float, end: float) -> list[float]:
        """Sorted arrival times in ``[start, end)`` seconds."""
        ...

    @property
    def mean_rate(self) -> float:
        """Mean arrivals per second over a long run (for a burst: over its spread)."""
        ...


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Poisson:
    """Exponential inter-arrival gaps: ``rate`` requests per second."""

    rate: float

    def __post_init__(self) -> None:
        _positive("rate", self.rate)

    @property
    def mean_rate(self) -> float:
        return self.rate

    def times(self, rng: random.Random, start: float, end: float) -> list[float]:
        found: list[float] = []
        t = start + rng.expovariate(self.rate)
        while t < end:
            found.append(t)
            t += rng.expovariate(self.rate)
        return found


@dataclass(frozen=True, slots=True)
class GammaArrivals:
    """Gamma inter-arrival gaps with mean ``1/rate`` seconds and coefficient of
    variation ``cv`` (1 is Poisson; larger is burstier)."""

    rate: float
    cv: float

    def __post_init__(self) -> None:
        _positive("rate", self.rate)
        _positive("cv", self.cv)

    @property
    def mean_rate(self) -> float:
        return self.rate

    def times(self, rng: random.Random, start: float, end: float) -> list[float]:
        shape = 1.0 / (self.cv * self.cv)
        scale = 1.0 / (self.rate * shape)
        found: list[float] = []
        t = start + rng.gammavariate(shape, scale)
        while t < end:
            found.append(t)
            t += rng.gammavariate(shape, scale)
        return found


@dataclass(frozen=True, slots=True)
class OnOff:
    """Poisson at ``rate`` for ``on`` seconds, then silent for ``off`` seconds, repeating."""

    rate: float
    on: float
    off: float

    def __post_init__(self) -> None:
        _positive("rate", self.rate)
        _positive("on", self.on)
        _positive("off", self.off)

    @property
    def mean_rate(self) -> float:
        return self.rate * self.on / (self.on + self.off)

    def times(self, rng: random.Random, start: float, end: float) -> list[float]:
        found: list[float] = []
        period = start
        inner = Poisson(self.rate)
        while period < end:
            found.extend(inner.times(rng, period, min(period + self.on, end)))
            period += self.on + self.off
        return found


@dataclass(frozen=True, slots=True)
class Ramp:
    """Poisson whose rate moves linearly from ``start_rate`` at the stream's
    start to ``end_rate`` at its end (requests per second; by thinning)."""

    start_rate: float
    end_rate: float

    def __post_init__(self) -> None:
        for name in ("start_rate", "end_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (math.isfinite(value) and value >= 0):
                raise UsageError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.start_rate == self.end_rate == 0:
            raise UsageError("a ramp needs a rate above 0 somewhere")

    @property
    def mean_rate(self) -> float:
        return (self.start_rate + self.end_rate) / 2

    def times(self, rng: random.Random, start: float, end: float) -> list[float]:
        top = max(self.start_rate, self.end_rate)
        span = end - start
        found: list[float] = []
        for t in Poisson(top).times(rng, start, end):
            rate = self.start_rate + (self.end_rate - self.start_rate) * (t - start) / span
            if rng.random() * top < rate:
                found.append(t)
        return found


@dataclass(frozen=True, slots=True)
class Burst:
    """``count`` arrivals starting ``at`` seconds after the stream's start, one
    every ``spread / count`` seconds (``spread`` 0: all at once)."""

    count: int
    at: float = 0.0
    spread: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise UsageError(f"count must be an int >= 1, got {self.count!r}")
        for name in ("at", "spread"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (math.isfinite(value) and value >= 0):
                raise UsageError(f"{name} must be a finite number >= 0, got {value!r}")

    @property
    def mean_rate(self) -> float:
        return self.count / self.spread if self.spread else math.inf

    def times(self, rng: random.Random, start: float, end: float) -> list[float]:
        first = start + self.at
        gap = self.spread / self.count
        return [t for t in (first + i * gap for i in range(self.count)) if t < end]
