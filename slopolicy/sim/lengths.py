"""Length distributions for prompts and outputs, in tokens.

Each draws an int >= 1 from a ``random.Random`` the caller seeds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from slopolicy.errors import UsageError

__all__ = ("Constant", "Empirical", "LengthDistribution", "LogNormal", "Uniform")


class LengthDistribution(Protocol):
    """Anything that draws a token count."""

    def sample(self, rng: random.Random) -> int:
        """One token count, >= 1."""
        ...

    @property
    def mean(self) -> float:
        """The mean token count (approximate where clipping applies)."""
        ...


def _count(name: str, value: int, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{name} must be an int >= {minimum}, got {value!r}")


@dataclass(frozen=True, slots=True)
class Constant:
    """Always ``value`` tokens."""

    value: int

    def __post_init__(self) -> None:
        _count("value", self.value)

    @property
    def mean(self) -> float:
        return float(self.value)

    def sample(self, rng: random.Random) -> int:
        return self.value


@dataclass(frozen=True, slots=True)
class Uniform:
    """Uniform over ``[low, high]`` tokens, both included."""

    low: int
    high: int

    def __post_init__(self) -> None:
        _count("low", self.low)
        _count("high", self.high, self.low)

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    def sample(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)


@dataclass(frozen=True, slots=True)
class LogNormal:
    """Log-normal with the given ``median`` and ``sigma`` (of the log), rounded
    and clipped to ``[low, high]`` tokens."""

    median: float
    sigma: float
    low: int = 1
    high: int = 1_000_000

    def __post_init__(self) -> None:
        if not (math.isfinite(self.median) and self.median >= 1):
            raise UsageError(f"median must be a finite number >= 1, got {self.median!r}")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise UsageError(f"sigma must be a finite number >= 0, got {self.sigma!r}")
        _count("low", self.low)
        _count("high", self.high, self.low)

    @property
    def mean(self) -> float:
        return min(max(self.median * math.exp(self.sigma**2 / 2), self.low), self.high)

    def sample(self, rng: random.Random) -> int:
        value = round(rng.lognormvariate(math.log(self.median), self.sigma))
        return min(max(value, self.low), self.high)


@dataclass(frozen=True, slots=True)
class Empirical:
    """Draws uniformly from observed ``values`` (e.g. a trace's lengths)."""

    values: tuple[int, ...]

    def __init__(self, values: Sequence[int]) -> None:
        object.__setattr__(self, "values", tuple(values))
        if not self.values:
            raise UsageError("an empirical distribution needs at least one value")
        for value in self.values:
            _count("value", value)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    def sample(self, rng: random.Random) -> int:
        return self.values[rng.randrange(len(self.values))]
