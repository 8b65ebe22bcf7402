"""The base every configuration model shares, and the ranges its numbers share.

Each range keeps an accepted policy runnable: a policy that validates builds a
``Policy``, a ``Gate`` and its description, and serves (``tests/config``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

__all__ = ("ConfigModel", "CostUnits", "Count", "Seconds", "Weight")

#: Seconds, for every duration a policy sets (queue waits, Retry-After, ladder
#: periods, SLO targets): at least 1 ms, so that a deadline or a timer set that
#: far ahead always moves a monotonic clock on (a subnormal one would not, and
#: the gate's timer would spin), and at most 10**9 (about 32 years).
Seconds = Annotated[float, Field(ge=1e-3, le=1e9)]
#: A fair-share weight (lanes, tiers), 1e-6 to 1e6: a cost divided by it never
#: overflows a fair-queue counter, as a subnormal weight's does at once.
Weight = Annotated[float, Field(ge=1e-6, le=1e6)]
#: Cost units, or cost units per second (rates, bursts, cost limits), 1e-6 to
#: 1e15: a wait for them (a deficit over a rate) stays a finite number of seconds.
CostUnits = Annotated[float, Field(ge=1e-6, le=1e15)]
#: A count of requests or tokens (caps, capacities, budgets), 1 to 2**53: the
#: core's counts stay exact integers in float arithmetic (``checks.MAX_COUNT``).
Count = Annotated[int, Field(gt=0, le=2**53)]


class ConfigModel(BaseModel):
    """Frozen, strict, no unknown keys, no NaN or infinity."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        allow_inf_nan=False,
        validate_default=True,
    )
