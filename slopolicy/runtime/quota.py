"""Where a Gate takes tenant quota: a strategy that turns a request into a decision.

A :class:`~slopolicy.Gate` asks its strategy for each arrival's decision and
tells it each request's end; the strategy drives the policy's admission:

* :class:`LocalQuota` (the default): the policy's own table,
  :meth:`Policy.submit <slopolicy.Policy.submit>` at once;
* :class:`~slopolicy.runtime.store_quota.StoreQuota`: a shared
  :class:`~slopolicy.backends.QuotaStore`, one round trip between
  :meth:`Policy.prepare <slopolicy.Policy.prepare>` and its outcome.

A strategy never touches the Gate: what it returns (an accepted decision,
queued, or a refusal already recorded) is for the Gate to act on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from anyio.abc import TaskStatus

from slopolicy.core.decisions import Decision
from slopolicy.core.outcome import Finished
from slopolicy.core.policy import Policy
from slopolicy.core.request import Request
from slopolicy.runtime.loop import Clock

__all__ = ("LocalQuota", "QuotaStrategy")


class QuotaStrategy(Protocol):
    """How a Gate's requests take quota (see the module docstring)."""

    #: Whether deciding waits for a round trip (then ``admit_nowait`` is refused).
    waits: bool

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        """The strategy's background work while the gate is open; reports
        ``task_status.started()`` once it can take requests."""
        ...

    async def admit(self, request: Request, clock: Clock, is_open: Callable[[], bool]) -> Decision:
        """``request``'s decision: accepted and queued in the policy, or a
        refusal the policy has recorded. Raises
        :class:`~slopolicy.GateClosed` when ``is_open()`` turns false while it
        waits (the request then has its outcome: withdrawn)."""
        ...

    def admit_now(self, request: Request, now: float) -> Decision:
        """:meth:`admit` without waiting, at ``now`` (monotonic seconds);
        :class:`~slopolicy.errors.UsageError` where deciding waits."""
        ...

    def ended(self, finished: Finished) -> None:
        """A request the policy queued has ended (any outcome): settle its quota."""
        ...


class LocalQuota:
    """Quota in the policy's own :class:`~slopolicy.core.quota.TenantQuotas`."""

    __slots__ = ("policy",)

    waits = False

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        """Nothing runs in the background: the policy settles its own quota."""
        task_status.started()

    async def admit(self, request: Request, clock: Clock, is_open: Callable[[], bool]) -> Decision:
        """:meth:`Policy.submit <slopolicy.Policy.submit>` now (never suspends)."""
        return self.policy.submit(request, now=clock())

    def admit_now(self, request: Request, now: float) -> Decision:
        """:meth:`Policy.submit <slopolicy.Policy.submit>` at ``now``."""
        return self.policy.submit(request, now=now)

    def ended(self, finished: Finished) -> None:
        """The policy settled it already."""
