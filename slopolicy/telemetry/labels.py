"""Bounded attribute values for tenants and models.

Every distinct attribute set becomes a time series that a metrics backend
keeps (a cumulative exporter keeps it for the life of the process), so a
value that comes from callers, like a tenant or a model name, must not reach
an attribute unbounded. Two policies:

* :class:`TopLabels` (tenants): an allow-list, plus the heaviest tenants by
  requests, found with a Misra-Gries summary of ``capacity`` counters
  (bounded memory, amortized O(1) per request) and re-ranked every ``every``
  requests. At most ``top`` tenants are named beside the allow-list at any
  time and at most ``max_named`` over the object's life; everyone else is
  ``"other"``.
* :class:`FirstSeenLabels` (models): an allow-list plus the first ``limit``
  names seen; later names are ``"other"``.

Both are thread-safe: one :class:`~slopolicy.telemetry.Telemetry` may serve
gates on several event loops.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from slopolicy.errors import UsageError
from slopolicy.telemetry.names import OTHER

__all__ = ("FirstSeenLabels", "LabelStatistics", "TopLabels")


@dataclass(frozen=True, slots=True)
class LabelStatistics:
    """A snapshot of a label policy.

    Attributes:
        named: names reported as themselves now (the allow-list included).
        ever_named: names beyond the allow-list ever reported as themselves.
        tracked: names with a traffic counter now (at most ``capacity``).
        observed: names looked up so far.
    """

    named: frozenset[str]
    ever_named: int
    tracked: int
    observed: int


def _positive(name: str, value: int, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class TopLabels:
    """Tenant names for metric attributes: the allow-list and the top ``top`` by
    requests are named, every other tenant is ``"other"``.

    Args:
        allow: names always reported as themselves.
        top: most tenants named by traffic at once, beside the allow-list.
        capacity: traffic counters kept (default ``max(64, 8 * top)``); the
            summary finds every tenant with more than ``1/(capacity+1)`` of
            the requests since the last re-rank.
        every: requests between re-ranks. Labels change only at a re-rank,
            so a tenant's series do not flap request to request; each
            re-rank also halves every counter, so the ranking follows recent
            traffic rather than all-time totals.
        min_count: the (halved) count a tenant needs to be named, so that
            with many tenants of equal, light traffic nobody is.
        max_named: most distinct tenants ever named beside the allow-list
            (default ``10 * top``): the hard bound on series over the life of
            the process, whatever the traffic does. Once reached, only
            tenants named before can be named again.
    """

    __slots__ = (
        "_allow",
        "_capacity",
        "_counts",
        "_ever",
        "_every",
        "_labels",
        "_lock",
        "_max_named",
        "_min_count",
        "_observed",
        "_seen",
        "_top",
    )

    def __init__(
        self,
        allow: Iterable[str] = (),
        *,
        top: int = 10,
        capacity: int | None = None,
        every: int = 256,
        min_count: int = 4,
        max_named: int | None = None,
    ) -> None:
        if isinstance(allow, str):
            raise UsageError("allow must be a collection of names, not one string")
        self._allow = frozenset(allow)
        self._top = _positive("top", top, minimum=0)
        self._capacity = _positive("capacity", max(64, 8 * top) if capacity is None else capacity)
        self._every = _positive("every", every)
        self._min_count = _positive("min_count", min_count)
        self._max_named = _positive(
            "max_named", 10 * top if max_named is None else max_named, minimum=0
        )
        self._counts: dict[str, int] = {}
        self._ever: set[str] = set()
        self._labels: dict[str, str] = {name: name for name in self._allow}
        self._seen = 0
        self._observed = 0
        self._lock = threading.Lock()

    def label(self, name: str) -> str:
        """Count one request from ``name``; the attribute value to report it under."""
        with self._lock:
            self._observed += 1
            if self._top:
                self._count(name)
            return self._labels.get(name, OTHER)

    def peek(self, name: str) -> str:
        """The attribute value ``name`` is reported under now, without counting
        it as a request (the ranking follows requests only)."""
        with self._lock:
            return self._labels.get(name, OTHER)

    def _count(self, name: str) -> None:
        counts = self._counts
        count = counts.get(name)
        if count is not None:
            counts[name] = count + 1
        elif len(counts) < self._capacity:
            counts[name] = 1
        else:
            # Misra-Gries: a newcomer with every counter taken lowers them all
            # by one. Each such pass removes `capacity` counts and each
            # request adds one, so passes cost O(1) per request amortized.
            self._counts = {key: value - 1 for key, value in counts.items() if value > 1}
        self._seen += 1
        if self._seen >= self._every:
            self._rerank()

    def _rerank(self) -> None:
        self._seen = 0
        heavy = sorted(
            (item for item in self._counts.items() if item[1] >= self._min_count),
            key=lambda item: (-item[1], item[0]),
        )
        named: list[str] = []
        for name, _ in heavy:
            if len(named) == self._top:
                break
            if name in self._allow:
                continue
            if name in self._ever or len(self._ever) < self._max_named:
                self._ever.add(name)
                named.append(name)
        labels = {name: name for name in self._allow}
        labels.update((name, name) for name in named)
        self._labels = labels
        self._counts = {key: value >> 1 for key, value in self._counts.items() if value > 1}

    def statistics(self) -> LabelStatistics:
        """A frozen snapshot: who is named now, and how much is tracked."""
        with self._lock:
            return LabelStatistics(
                frozenset(self._labels), len(self._ever), len(self._counts), self._observed
            )

    def __repr__(self) -> str:
        return (
            f"TopLabels({sorted(self._allow)!r}, top={self._top}, capacity={self._capacity}, "
            f"every={self._every}, min_count={self._min_count}, max_named={self._max_named})"
        )


class FirstSeenLabels:
    """Model names for metric attributes: the allow-list and the first ``limit``
    other names seen are named; later names are ``"other"``.

    Models are few and set by the host (the ladder's ``cheaper_model``
    included), so first come is named; the bound only stops a caller who
    sends made-up model names from growing the series.
    """

    __slots__ = ("_allow", "_labels", "_limit", "_lock", "_observed")

    def __init__(self, allow: Iterable[str] = (), *, limit: int = 16) -> None:
        if isinstance(allow, str):
            raise UsageError("allow must be a collection of names, not one string")
        self._allow = frozenset(allow)
        self._limit = _positive("limit", limit, minimum=0)
        self._labels: set[str] = set(self._allow)
        self._observed = 0
        self._lock = threading.Lock()

    def label(self, name: str) -> str:
        """The attribute value to report ``name`` under."""
        self._observed += 1  # a lost increment under a race only skews statistics
        if name in self._labels:
            return name
        with self._lock:
            if len(self._labels) - len(self._allow) < self._limit:
                self._labels.add(name)
                return name
        return OTHER

    def statistics(self) -> LabelStatistics:
        """A frozen snapshot of the named set."""
        with self._lock:
            named = frozenset(self._labels)
            return LabelStatistics(named, len(named - self._allow), 0, self._observed)

    def __repr__(self) -> str:
        return f"FirstSeenLabels({sorted(self._allow)!r}, limit={self._limit})"
