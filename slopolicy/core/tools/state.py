"""The tool pool's state: a queued call, one tool's slots and queues, one tenant's counts.

Plain records the :class:`~slopolicy.core.tools.pool.ToolPool` owns and
changes; nothing here checks its arguments (the pool did).
"""

from __future__ import annotations

from collections import deque

from slopolicy.core.quota.bucket import TokenBucket
from slopolicy.core.reasons import Reason
from slopolicy.core.tools.calls import ToolOutcome
from slopolicy.core.tools.limits import ToolLimits, ToolSpec
from slopolicy.core.tools.rates import RollingRates

__all__ = ("Group", "TenantCalls", "Waiter")


class Waiter:
    """A call waiting for a slot."""

    __slots__ = ("buckets", "group", "id", "queued_at", "tenant", "timeout", "tool")

    def __init__(
        self,
        id: int,
        tenant: str,
        tool: str,
        group: str,
        queued_at: float,
        timeout: float | None,
        buckets: tuple[TokenBucket, ...],
    ) -> None:
        self.id = id
        self.tenant = tenant
        self.tool = tool
        self.group = group
        self.queued_at = queued_at
        self.timeout = timeout
        self.buckets = buckets  # the rate tokens it took, given back if it never starts


class Group:
    """One configured tool's state."""

    __slots__ = (
        "bucket",
        "ended",
        "held",
        "in_flight",
        "queues",
        "rates",
        "refused",
        "served",
        "spec",
        "started",
        "tenant_buckets",
        "waiting",
    )

    def __init__(self, spec: ToolSpec, limits: ToolLimits, *, now: float) -> None:
        self.spec = spec
        self.in_flight = 0
        self.waiting = 0
        self.queues: dict[str, deque[Waiter]] = {}  # tenant -> its waiters, oldest first
        self.held: dict[str, int] = {}  # tenant -> slots it holds here
        self.served: dict[str, int] = {}  # tenant -> sequence number of its latest grant
        self.bucket = (
            None
            if spec.rate is None or spec.burst is None
            else TokenBucket(spec.rate, spec.burst, now=now)
        )
        self.tenant_buckets: dict[str, TokenBucket] = {}
        self.started = 0
        self.ended = dict.fromkeys(ToolOutcome, 0)
        self.refused: dict[Reason, int] = {}
        self.rates = RollingRates(limits.window, limits.min_calls)


class TenantCalls:
    """One tenant's calls holding a slot and waiting, all tools together."""

    __slots__ = ("in_flight", "waiting")

    def __init__(self) -> None:
        self.in_flight = 0
        self.waiting = 0
