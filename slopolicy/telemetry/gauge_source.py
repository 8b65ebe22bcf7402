"""The gauges' view of one open gate's policy: live on its loop, else the
last :class:`Readings` the loop published for readers on other threads."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import anyio
from opentelemetry.util.types import AttributeValue

from slopolicy.core.lifecycle import PolicyStatistics
from slopolicy.core.policy import Policy
from slopolicy.core.slo.snapshot import SLOSnapshot
from slopolicy.core.tasks.trackers import TaskSnapshot

__all__ = ("GaugeSource", "Readings")

Attrs = dict[str, AttributeValue]
_S = TypeVar("_S")


@dataclass(frozen=True, slots=True)
class Readings:
    """What the gauges report for one policy, read on its loop at ``at``
    (the gate's clock, monotonic seconds)."""

    at: float
    statistics: PolicyStatistics
    lanes: tuple[SLOSnapshot, ...]
    tasks: tuple[TaskSnapshot, ...] = ()


class GaugeSource:
    """One open gate's policy, as the observable gauges see it."""

    __slots__ = ("attributes", "observed", "policy", "published", "thread")

    def __init__(self, policy: Policy, attributes: Mapping[str, AttributeValue]) -> None:
        self.policy = policy
        self.attributes: Attrs = dict(attributes)
        self.thread = threading.get_ident()
        # Set from reader threads, read on the loop: a plain flag is enough
        # (a lost or late update delays one refresh, nothing else).
        self.observed = False
        self.published: Readings | None = None

    def publish(self, now: float) -> None:
        """Read the policy now (on its loop) for readers on other threads."""
        policy = self.policy
        self.published = Readings(
            now,
            policy.statistics(now=now),
            policy.slo_trackers.snapshots(now=now, tenants=False),
            policy.task_trackers.snapshots(now=now, tenants=False),
        )

    def statistics(self) -> PolicyStatistics | None:
        """The policy's statistics: live on its loop, else the last published."""
        if threading.get_ident() == self.thread:
            return self.policy.statistics(now=_loop_time())
        readings = self._for_reader()
        return None if readings is None else readings.statistics

    def lanes(self) -> tuple[SLOSnapshot, ...]:
        """Every lane's SLO snapshot: live on its loop, else the last published."""
        trackers = self.policy.slo_trackers
        return self._read(lambda now: trackers.snapshots(now=now, tenants=False), _lanes_of)

    def tasks(self) -> tuple[TaskSnapshot, ...]:
        """Every lane's task snapshot (lanes where a task has ended): live on
        its loop, else the last published."""
        trackers = self.policy.task_trackers
        return self._read(lambda now: trackers.snapshots(now=now, tenants=False), _tasks_of)

    def _read(
        self,
        live: Callable[[float], tuple[_S, ...]],
        published: Callable[[Readings], tuple[_S, ...]],
    ) -> tuple[_S, ...]:
        if threading.get_ident() == self.thread:
            now = _loop_time()
            if now is not None:
                return live(now)
        readings = self._for_reader()
        return () if readings is None else published(readings)

    def _for_reader(self) -> Readings | None:
        # Asks the loop to keep publishing; the first such read finds nothing
        # (or an old reading) until the next refresh.
        self.observed = True
        return self.published


def _lanes_of(readings: Readings) -> tuple[SLOSnapshot, ...]:
    return readings.lanes


def _tasks_of(readings: Readings) -> tuple[TaskSnapshot, ...]:
    return readings.tasks


def _loop_time() -> float | None:
    try:
        return anyio.current_time()
    except RuntimeError:  # no event loop running in this thread (any more)
        return None
