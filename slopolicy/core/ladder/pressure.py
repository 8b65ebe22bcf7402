"""Pressure snapshots and the triggers that read them, for the fallback ladder.

A :class:`Pressure` is what the host (or the SLO trackers) measured at one
``now``: the seed's trigger signals, each ``None`` when unknown or stale. A
:class:`Trigger` reads one value from a snapshot and sorts it into a zone with
hysteresis (larger values are worse)::

    value >= enter           hot      pressure: the ladder may climb
    exit <= value < enter    warm     the band: the ladder holds its level
    value < exit             cool     relief: counts toward a step down
    None                     unknown  no evidence either way: the ladder holds

Unknown is never relief: it cannot cancel a hot trigger, and it breaks the
run of all-cool readings a step down waits for. A signal your deployment never
reports should have no trigger (pass ``None`` for it to
:func:`default_triggers`), or the ladder can climb but never come down.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from slopolicy.errors import UsageError

__all__ = (
    "SIGNALS",
    "Pressure",
    "Reader",
    "Reading",
    "Signal",
    "Trigger",
    "Zone",
    "default_triggers",
)

#: The built-in signals of a :class:`Pressure`: the seed's five in its order,
#: then the time between tokens.
SIGNALS = (
    "ttft_p95_fraction",
    "queue_wait_fraction",
    "kv_usage",
    "decode_tps_drop",
    "tool_timeout_rate",
    "tbt_p99_fraction",
)


def _check_value(name: str, value: object) -> float | None:
    if value is None:
        return None
    # bool is an int subclass; True as a reading is a bug, not a 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{name}: expected a number or None, got {type(value).__name__}")
    if not math.isfinite(value):
        raise UsageError(f"{name}: must be finite (pass None for an unknown value), got {value}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Pressure:
    """The trigger inputs at one ``now``; ``None`` means unknown or stale.

    Attributes:
        ttft_p95_fraction: the watched lane's p95 TTFT over its p95 target
            (1.0 = at target).
        queue_wait_fraction: the watched lane's p95 queue wait over that same
            TTFT target.
        kv_usage: fraction of the engine's KV-cache blocks in use, 0-1.
        decode_tps_drop: fractional drop of decode tokens/s against the
            baseline at similar load (0.3 = 30 % slower; negative = faster).
        tool_timeout_rate: fraction of tool or retriever calls timing out, 0-1.
        tbt_p99_fraction: the watched lane's p99 time between tokens over its
            ``tbt_p99`` target (1.0 = at target).
        extra: further named signals, for custom triggers.
    """

    ttft_p95_fraction: float | None = None
    queue_wait_fraction: float | None = None
    kv_usage: float | None = None
    decode_tps_drop: float | None = None
    tool_timeout_rate: float | None = None
    tbt_p99_fraction: float | None = None
    extra: Mapping[str, float | None] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for name in SIGNALS:
            object.__setattr__(self, name, _check_value(name, getattr(self, name)))
        if not isinstance(self.extra, Mapping):
            raise UsageError(f"extra: expected a mapping, got {type(self.extra).__name__}")
        extra: dict[str, float | None] = {}
        for key, value in self.extra.items():
            if not isinstance(key, str) or not key or key in SIGNALS:
                raise UsageError(f"extra: bad signal name {key!r}")
            extra[key] = _check_value(f"extra[{key!r}]", value)
        # A copy: the caller's dict may change after the snapshot is taken.
        object.__setattr__(self, "extra", extra)

    def signal(self, name: str) -> float | None:
        """The built-in signal ``name``, or ``extra[name]``; ``None`` when absent."""
        if name in SIGNALS:
            value: float | None = getattr(self, name)
            return value
        return self.extra.get(name)


#: Reads one value from a snapshot: a number, or ``None`` for unknown.
Reader = Callable[[Pressure], "float | None"]


@dataclass(frozen=True, slots=True)
class Signal:
    """A :data:`Reader` for one named signal (a built-in field or an ``extra``)."""

    name: str

    def __call__(self, pressure: Pressure) -> float | None:
        return pressure.signal(self.name)


class Zone(enum.Enum):
    """Where a reading falls against its trigger's thresholds."""

    HOT = "hot"
    WARM = "warm"
    COOL = "cool"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Reading:
    """One trigger's value at an update, with its thresholds (for events)."""

    trigger: str
    value: float
    enter: float
    exit: float

    def __str__(self) -> str:
        if self.value >= self.enter:
            return f"{self.trigger}={self.value:.3g} >= {self.enter:.3g}"
        if self.value < self.exit:
            return f"{self.trigger}={self.value:.3g} < {self.exit:.3g}"
        return f"{self.trigger}={self.value:.3g} in [{self.exit:.3g}, {self.enter:.3g})"


@dataclass(frozen=True, slots=True)
class Trigger:
    """A named pressure signal with hysteresis: hot at ``enter`` or above,
    cool below ``exit`` (``exit < enter``, same units as the value).

    ``read`` takes a :class:`Pressure` and returns the value or ``None``; when
    omitted the trigger reads the signal called ``name``. Any callable works,
    so custom triggers can combine signals or read ``Pressure.extra``.
    """

    name: str
    enter: float
    exit: float
    read: Reader | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UsageError("a trigger needs a non-empty name")
        enter = _check_value(f"trigger {self.name!r} enter", self.enter)
        exit_ = _check_value(f"trigger {self.name!r} exit", self.exit)
        if enter is None or exit_ is None or not exit_ < enter:
            raise UsageError(
                f"trigger {self.name!r}: exit ({self.exit}) must be below enter ({self.enter})"
            )
        if self.read is not None and not callable(self.read):
            raise UsageError(f"trigger {self.name!r}: read must be callable")

    def value(self, pressure: Pressure) -> float | None:
        """This trigger's value in ``pressure``; raises :class:`UsageError` when a
        custom reader returns something other than a finite number or ``None``."""
        raw = pressure.signal(self.name) if self.read is None else self.read(pressure)
        return _check_value(f"trigger {self.name!r} read", raw)

    def zone(self, value: float | None) -> Zone:
        """Where ``value`` falls: hot, warm (the hysteresis band), cool or unknown."""
        if value is None:
            return Zone.UNKNOWN
        if value >= self.enter:
            return Zone.HOT
        if value < self.exit:
            return Zone.COOL
        return Zone.WARM

    def reading(self, value: float) -> Reading:
        """``value`` with this trigger's name and thresholds."""
        return Reading(self.name, value, self.enter, self.exit)


def default_triggers(
    *,
    ttft_p95_fraction: tuple[float, float] | None = (0.8, 0.6),
    queue_wait_fraction: tuple[float, float] | None = (0.5, 0.25),
    kv_usage: tuple[float, float] | None = (0.92, 0.8),
    decode_tps_drop: tuple[float, float] | None = (0.3, 0.15),
    tool_timeout_rate: tuple[float, float] | None = (0.05, 0.02),
    tbt_p99_fraction: tuple[float, float] | None = None,
) -> tuple[Trigger, ...]:
    """The seed's five triggers, then the TBT one (off unless given), as
    ``(enter, exit)`` pairs in :data:`SIGNALS` order; ``None`` leaves a trigger
    out. Defaults match ``LadderConfig``'s, but for ``ttft_p95_fraction``."""
    given = {
        "ttft_p95_fraction": ttft_p95_fraction,
        "queue_wait_fraction": queue_wait_fraction,
        "kv_usage": kv_usage,
        "decode_tps_drop": decode_tps_drop,
        "tool_timeout_rate": tool_timeout_rate,
        "tbt_p99_fraction": tbt_p99_fraction,
    }
    triggers: list[Trigger] = []
    for name in SIGNALS:
        pair = given[name]
        if pair is None:
            continue
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise UsageError(f"{name}: expected (enter, exit) or None, got {pair!r}")
        triggers.append(Trigger(name, pair[0], pair[1]))
    return tuple(triggers)
