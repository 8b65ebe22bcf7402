"""Finding a policy's goodput capacity on a curve of attainment against rate scale.

**Goodput capacity** (DistServe) is the highest rate scale at which
attainment stays at or above ``target`` (0.9). Knees are sharp, so the
search is on a geometric grid, then refined where the curve crosses:

1. the **coarse grid** is ``STEP**j`` (``STEP`` = √2: 0.25, 0.35, 0.5, 0.71,
   1, 1.41 ...); the walk starts at a given grid point and goes up one
   point at a time until attainment falls below ``target``, or down until it
   reaches it when the first point already fails;
2. the bracket (the highest point that attains, the next one up, which does
   not) is halved in log scale ``refine`` times (3: to within 4.4%);
3. the capacity is interpolated in log scale between the final bracket's
   ends, where the straight line through their attainments meets ``target``.

It stops at the first failing point above a passing one, so a curve that
recovers further up is not followed. A curve that attains at every grid
point up to the top, or at none down to the bottom, gives a capacity bound
(``above`` the top, ``below`` the bottom) instead of a value. Everything here
is pure: :func:`find_capacity` takes the curve as a function, so it is tested
on synthetic curves; :mod:`slopolicy.sim.sweep` runs the simulations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from slopolicy.errors import UsageError

__all__ = (
    "REFINE",
    "STEP",
    "Capacity",
    "find_capacity",
    "grid_index",
    "grid_point",
    "interpolate",
)

#: The coarse grid's ratio between neighbouring rate scales.
STEP = math.sqrt(2.0)
#: Bisections of each bracket by default.
REFINE = 3

Bound = Literal["found", "above", "below"]


@dataclass(frozen=True, slots=True)
class Capacity:
    """A capacity: ``scale`` (rate scale), ``bound`` ``found`` (interpolated
    between ``low``, which attains, and ``high``, which does not), ``above``
    (attains up to the grid's top, ``scale`` = ``low`` = ``high``: at least
    that) or ``below`` (attains nowhere down to the bottom: less than that)."""

    scale: float
    bound: Bound
    low: float
    high: float

    def __str__(self) -> str:
        prefix = {"found": "", "above": ">= ", "below": "< "}[self.bound]
        return f"{prefix}{self.scale:.3g}x"


def grid_point(index: int) -> float:
    """The coarse grid's ``index``-th rate scale, ``STEP**index`` (exact at even indices)."""
    scale: float = 2.0 ** (index / 2)
    return scale


def grid_index(scale: float) -> int:
    """The index of the highest coarse grid point at or below ``scale`` (> 0)."""
    return math.floor(math.log(scale) / math.log(STEP) + 1e-9)


def interpolate(low: float, a_low: float, high: float, a_high: float, target: float) -> float:
    """Where attainment meets ``target`` between ``low`` (``a_low`` >= target)
    and ``high`` (``a_high`` < target), on a straight line in log scale."""
    if a_low <= a_high:
        return low
    fraction = (a_low - target) / (a_low - a_high)
    return math.exp(math.log(low) + min(max(fraction, 0.0), 1.0) * math.log(high / low))


def find_capacity(
    attain: Callable[[float], float],
    *,
    start: int,
    lowest: int,
    highest: int,
    target: float = 0.9,
    refine: int = REFINE,
) -> tuple[Capacity, Mapping[float, float]]:
    """The capacity of the curve ``attain`` (rate scale -> attainment 0-1),
    walking the coarse grid from index ``start`` within ``[lowest, highest]``
    (see the module docstring), and every point it evaluated, by scale."""
    if not lowest <= start <= highest:
        raise UsageError("the sweep's start must be within its grid")
    if refine < 0:
        raise UsageError(f"refine must be >= 0, got {refine!r}")
    seen: dict[float, float] = {}

    def at(scale: float) -> float:
        if scale not in seen:
            seen[scale] = attain(scale)
        return seen[scale]

    index = start
    if at(grid_point(index)) < target:
        while index > lowest and at(grid_point(index)) < target:
            index -= 1
        if at(grid_point(index)) < target:
            bottom = grid_point(index)
            return Capacity(bottom, "below", bottom, bottom), seen
    while index < highest and at(grid_point(index + 1)) >= target:
        index += 1
    if index == highest:
        top = grid_point(index)
        return Capacity(top, "above", top, top), seen
    low, high = grid_point(index), grid_point(index + 1)
    for _ in range(refine):
        middle = math.sqrt(low * high)
        if at(middle) >= target:
            low = middle
        else:
            high = middle
    scale = interpolate(low, at(low), high, at(high), target)
    return Capacity(scale, "found", low, high), seen
