"""The Gate's side of a quota store: take quota there, queue in the policy, give it back.

With ``Gate(policy, quota_store=store)`` an admission is::

    policy.prepare(request, now)        route + ladder, no quota taken
    await store.acquire(tenant, tier, lane, cost)   one round trip (Redis)
    policy.enqueue(decision, now, quota_held=True)  queue; the policy's own quotas untouched

and the end of every accepted request (finished, failed, cancelled, expired,
or refused by a full queue after the store granted it) settles the lease
with the cost in its :class:`~slopolicy.Finished` record and releases it,
exactly once, in a task of the Gate's task group, shielded from
cancellation (the store's own timeouts bound it). The store's
:meth:`~slopolicy.backends.QuotaStore.maintain` (lease renewal) runs in the
same task group.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from slopolicy.backends.base import Lease, QuotaStore
from slopolicy.core.decisions import Admit, Demote
from slopolicy.core.outcome import Finished
from slopolicy.core.quota.tenants import QuotaRefusal
from slopolicy.core.request import Request
from slopolicy.errors import GateClosed, Rejected, UsageError

if TYPE_CHECKING:
    from slopolicy.runtime.gate import Gate
    from slopolicy.runtime.ticket import Ticket
    from slopolicy.runtime.waiting import Waiter

__all__ = ("StoreQuota",)

logger = logging.getLogger("slopolicy.gate")


class StoreQuota:
    """Admission through a :class:`~slopolicy.backends.QuotaStore` for one Gate."""

    __slots__ = ("_gate", "_leases", "store")

    def __init__(self, gate: Gate, store: QuotaStore) -> None:
        self._gate = gate
        self.store = store
        # Request id -> its lease until the request ends; None while the
        # store's answer is awaited, so an id is live from prepare on.
        self._leases: dict[str, Lease | None] = {}

    async def run(self) -> None:
        """Keep the store's leases alive while the gate is open."""
        await self.store.maintain()

    async def submit(self, request: Request) -> Ticket | Waiter | Rejected:
        """What ``Gate._submit`` returns, with the quota taken in the store."""
        gate = self._gate
        if gate._state != "open":
            return gate._submit(request)  # raises or refuses as the gate does
        if request.id in self._leases:
            raise UsageError(f"request id {request.id!r} is already live")
        policy = gate.policy
        now = self._gate.clock()
        decision = policy.prepare(request, now)
        if not isinstance(decision, (Admit, Demote)):
            return gate._refused(request, decision, now)
        tier = policy.router.tiers.get(decision.tier)
        assert tier is not None  # the router only names tiers it knows
        self._leases[request.id] = None
        try:
            granted = await self.store.acquire(request.tenant, tier, decision.lane, decision.cost)
        except BaseException:
            del self._leases[request.id]
            policy.withdraw(decision, self._gate.clock())  # cancelled: the store undid its part
            raise
        if isinstance(granted, QuotaRefusal):
            del self._leases[request.id]
            return self._refuse(request, decision, granted)
        # From here the lease must reach settle and release whatever happens.
        self._leases[request.id] = granted
        try:
            if gate._state != "open":  # the gate closed during the round trip
                policy.withdraw(decision, self._gate.clock())
                result: Ticket | Waiter | Rejected = GateClosed(decision=decision)
            else:
                result = gate._submit(request, decision)
        except BaseException:
            self._give_back(request.id, 0.0)
            raise
        if isinstance(result, Rejected):  # refused after the store granted it (queue full)
            self._give_back(request.id, 0.0)
        return result

    def _refuse(
        self, request: Request, decision: Admit | Demote, refusal: QuotaRefusal
    ) -> Rejected:
        now = self._gate.clock()
        refused = self._gate.policy.refuse(
            decision,
            refusal.reason,
            refusal.message,
            now,
            retry_after=refusal.retry_after,
            http_status=refusal.http_status,
        )
        return self._gate._refused(request, refused, now)

    def ended(self, finished: Finished) -> None:
        """A request ended: settle its lease with the actual cost and release it."""
        self._give_back(finished.id, finished.cost)

    def _give_back(self, request_id: str, cost: float) -> None:
        lease = self._leases.get(request_id)
        if lease is None:  # none, or still being acquired
            return
        del self._leases[request_id]
        group = self._gate._group
        try:
            if group is None:
                raise RuntimeError("no task group")
            group.start_soon(self._shielded, lease, cost, name="slopolicy quota release")
        except RuntimeError:
            # The gate's task group is gone: a ticket released after the gate
            # closed. A store that answers without suspending (in memory) is
            # done with it here; a network store's lease expires on its own.
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
