"""The gate's snapshot: :class:`GateStatistics`, from :meth:`Gate.statistics`."""

from __future__ import annotations

from dataclasses import dataclass

from slopolicy.core.lifecycle import PolicyStatistics

__all__ = ("GateStatistics",)


@dataclass(frozen=True, slots=True)
class GateStatistics:
    """A snapshot: callers waiting in ``admit``, whether the gate is open, and the policy's."""

    waiting: int
    open: bool
    policy: PolicyStatistics
