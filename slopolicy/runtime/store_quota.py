"""Quota in a shared store: take it there, queue in the policy, give it back.

With ``Gate(policy, quota_store=store)`` the policy's quota is delegated
(:meth:`Policy.delegate_quota <slopolicy.Policy.delegate_quota>`) and an
admission is::

    policy.prepare(request, now)                    route + ladder, no quota taken
    await store.acquire(tenant, tier, lane, cost)   one round trip (Redis)
    policy.enqueue / refuse / withdraw              exactly one outcome

and the end of every accepted request (finished, failed, cancelled, expired,
or refused by a full queue after the store granted it) settles the lease
with the cost in its :class:`~slopolicy.Finished` record and releases it,
exactly once, in a task of the strategy's task group, shielded from
cancellation (the store's own timeouts bound it). The store's
:meth:`~slopolicy.backends.QuotaStore.maintain` (lease renewal) runs in the
same task group, a task of the Gate's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup, TaskStatus

from slopolicy.backends.base import Lease, QuotaStore
from slopolicy.core.decisions import Admit, Decision, Demote
from slopolicy.core.outcome import Finished
from slopolicy.core.policy import Policy
from slopolicy.core.quota.refusals import QuotaRefusal
from slopolicy.core.request import Request
from slopolicy.errors import GateClosed, UsageError
from slopolicy.runtime.loop import Clock

__all__ = ("StoreQuota",)

logger = logging.getLogger("slopolicy.gate")


class StoreQuota:
    """Admission through a :class:`~slopolicy.backends.QuotaStore` (see the module
    docstring); a :class:`~slopolicy.runtime.quota.QuotaStrategy`."""

    __slots__ = ("_group", "_leases", "policy", "store")

    waits = True

    def __init__(self, policy: Policy, store: QuotaStore) -> None:
        policy.delegate_quota()
        self.policy = policy
        self.store = store
        # Request id -> its lease until the request ends; None while the
        # store's answer is awaited, so an id is live from prepare on.
        self._leases: dict[str, Lease | None] = {}
        self._group: TaskGroup | None = None

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        """Keep the store's leases alive, and release ended ones, while the
        gate is open."""
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                task_status.started()
                await self.store.maintain()
                await anyio.sleep_forever()
        finally:
            self._group = None

    def admit_now(self, request: Request, now: float) -> Decision:
        """Refused: taking quota in the store is a round trip."""
        raise UsageError("admit_nowait cannot wait for a quota store; await admit()")

    async def admit(self, request: Request, clock: Clock, is_open: Callable[[], bool]) -> Decision:
        """``request``'s decision, with its quota taken in the store (see the
        module docstring)."""
        if request.id in self._leases:
            raise UsageError(f"request id {request.id!r} is already live")
        policy = self.policy
        decision = policy.prepare(request, now=clock())
        if not isinstance(decision, (Admit, Demote)):
            return decision
        tier = policy.tiers.get(decision.tier)
        assert tier is not None  # the router only names tiers it knows
        self._leases[request.id] = None
        try:
            granted = await self.store.acquire(request.tenant, tier, decision.lane, decision.cost)
        except BaseException:
            del self._leases[request.id]
            policy.withdraw(decision, now=clock())  # cancelled: the store undid its part
            raise
        if isinstance(granted, QuotaRefusal):
            del self._leases[request.id]
            return policy.refuse(
                decision,
                granted.reason,
                granted.message,
                now=clock(),
                retry_after=granted.retry_after,
                http_status=granted.http_status,
            )
        # From here the lease must reach settle and release whatever happens.
        self._leases[request.id] = granted
        try:
            if not is_open():  # the gate closed during the round trip
                policy.withdraw(decision, now=clock())
                raise GateClosed(decision=decision)
            result = policy.enqueue(decision, now=clock())
        except BaseException:
            self._give_back(request.id, 0.0)
            raise
        if not result.accepted:  # refused after the store granted it (queue full)
            self._give_back(request.id, 0.0)
        return result

    def ended(self, finished: Finished) -> None:
        """A request ended: settle its lease with the actual cost and release it."""
        self._give_back(finished.id, finished.cost)

    def _give_back(self, request_id: str, cost: float) -> None:
        lease = self._leases.get(request_id)
        if lease is None:  # none, or still being acquired
            return
        del self._leases[request_id]
        group = self._group
        if group is not None:
            group.start_soon(self._shielded, lease, cost, name="slopolicy quota release")
            return
        # The task group is gone: a ticket released after the gate closed. A
        # store that answers without suspending (in memory) is done with it
        # here; a network store's lease expires on its own.
        finishing = self._finish(lease, cost)
        try:
            finishing.send(None)
        except StopIteration:
            return
        finishing.close()
        logger.warning("quota lease %r outlived its gate; it expires on its own", lease)

    async def _shielded(self, lease: Lease, cost: float) -> None:
        with anyio.CancelScope(shield=True):
            await self._finish(lease, cost)

    async def _finish(self, lease: Lease, cost: float) -> None:
        await self.store.finish(lease, cost)  # settle, then release: one round trip
