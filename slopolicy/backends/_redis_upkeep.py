"""What a :class:`~slopolicy.backends.redis.RedisQuotaStore` does besides
answering requests: send the operations waiting for Redis (settles, releases,
aborts), renew the live leases, follow Redis's health through the circuit
breaker, and read the store's state (:meth:`~RedisUpkeep.snapshot`,
:meth:`~RedisUpkeep.statistics`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import MappingProxyType

import anyio
from redis.exceptions import RedisError

from slopolicy.backends._redis_calls import KeyBook, Scripts, level_from, text, token_of
from slopolicy.backends._scripts import SCRIPTS, Script
from slopolicy.backends.base import Lease, StoreStatistics, TenantSnapshot
from slopolicy.backends.failure import CircuitBreaker, FailurePolicy
from slopolicy.core.decisions import Reason
from slopolicy.core.specs import TierSpec

__all__ = ("FAILURES", "RedisUpkeep")

logger = logging.getLogger("slopolicy.backends.redis")

# What "Redis is unavailable" looks like: redis-py's errors (connection,
# timeout, loading, READONLY, OOM...), socket errors, and our own deadline.
FAILURES = (RedisError, OSError, TimeoutError)


class RedisUpkeep:
    """The background half of a Redis quota store (see the module docstring);
    the store sets every attribute below in its ``__init__``."""

    _admitted: int
    _book: KeyBook
    _breaker: CircuitBreaker
    _clock: Callable[[], float] | None
    _failures: int
    _fallback_admitted: int
    _grace: str
    _live: dict[str, Lease]
    _lost: int
    _on_failure: FailurePolicy
    _pending: dict[str, Lease]
    _refusals: dict[Reason, int]
    _renew_every: float
    _resyncs: int
    _scripts: Scripts
    _ttl_arg: str
    _wake: anyio.Event | None

    async def _push(self, lease: Lease) -> None:
        """Send the lease's waiting operations (settle, then release or abort)
        now, or leave them pending for :meth:`renew`. Never raises a Redis error."""
        self._pending[lease.id] = lease
        if not self._breaker.allow():
            return
        try:
            await self._send(lease)
        except FAILURES as error:
            self._failed(error, "release" if lease._released else "settle")
            return
        except BaseException:
            self._breaker.abandon()
            raise
        self._succeeded()

    async def _send(self, lease: Lease) -> None:
        """Send what waits for ``lease``: a settle, then a release or abort, in
        one round trip when both wait."""
        token = token_of(lease)
        keys = token.keys.all()
        calls: list[tuple[Script, Sequence[str], Sequence[str]]] = []
        actual = token.settle_to
        if actual is not None:
            args = (lease.id, repr(float(actual)), repr(float(token.charged)), self._now())
            calls.append((SCRIPTS["settle"], keys, (*args, self._grace, *token.args, lease.lane)))
        ending = token.release or token.abort
        if ending:
            flag = "1" if token.abort else ""
            calls.append((SCRIPTS["release"], keys, (lease.id, self._now(), flag, self._grace)))
        if not calls:
            replies: list[list[str]] = []
        elif len(calls) == 1:
            replies = [await self._scripts.call(*calls[0])]
        else:
            replies = await self._scripts.batch(calls)
        if actual is not None:
            token.charged = actual
            if token.settle_to == actual:
                token.settle_to = None
        if ending:
            reply = replies[-1]
            token.release = token.abort = False
            token.remote = False
            if lease.released_at is None:
                lease.released_at = float(text(reply[1]))
        if token.settle_to is None and not token.release and not token.abort:
            self._pending.pop(lease.id, None)

    # -- renewal -------------------------------------------------------------------

    async def renew(self) -> int:
        """Send waiting operations, then extend every live lease by ``lease_ttl``
        (fallback leases and leases Redis lost are registered again): one
        pipelined round trip beyond the waiting operations. Returns the leases
        renewed; 0 while Redis is unavailable."""
        if not self._breaker.allow():
            return 0
        trial = self._breaker.state != "closed"
        batch: list[Lease] = []
        try:
            pending = list(self._pending.values())
            for lease in pending:
                await self._send(lease)
            batch = list(self._live.values())
            if batch:
                await self._renew(batch)
            elif trial and not pending:
                await self._scripts.ping()  # the breaker's trial, with nothing else to send
        except FAILURES as error:
            self._failed(error, "renew")
            return 0
        except BaseException:
            self._breaker.abandon()
            raise
        finally:
            # Leases released while the renewal was in flight (or failed, or
            # was cancelled) may have been registered again after their
            # release: release them again, now or once Redis answers.
            again = [lease for lease in batch if lease._released]
            for lease in again:
                token = token_of(lease)
                token.release = token.remote = True
                self._pending[lease.id] = lease
        self._succeeded()
        for lease in again:
            await self._push(lease)
        return len(batch)

    async def _renew(self, batch: Sequence[Lease]) -> None:
        groups: dict[str, list[Lease]] = {}
        for lease in batch:
            token = token_of(lease)
            groups.setdefault(token.keys.leases, []).append(lease)
        calls = []
        for leases in groups.values():
            keys = token_of(leases[0]).keys
            lane_keys: dict[str, int] = {}
            args: list[str] = [self._now(), self._ttl_arg, self._grace]
            for lease in leases:
                token = token_of(lease)
                index = lane_keys.setdefault(token.keys.lane_leases, len(lane_keys) + 3)
                args += (lease.id, str(index), repr(float(token.charged)), lease.lane)
            calls.append(((keys.leases, keys.costs, *lane_keys), args))
        # Fallback leases are registered from here on, so their release goes
        # to Redis too, whatever came back.
        was_remote = {lease.id: (lease, token_of(lease).remote) for lease in batch}
        for lease in batch:
            token_of(lease).remote = True
        replies = await self._scripts.pipeline(SCRIPTS["renew"], calls)
        # A lease released while the renewal was in flight was registered
        # again by it (renew() releases it again); it was not lost.
        lost = sum(
            remote and not lease._released
            for reply in replies
            for lease, remote in (was_remote[lease_id] for lease_id in reply[1:])
        )
        if lost:
            self._lost += lost
            logger.warning(
                "Redis had lost %d live quota leases (expired or a restart); registered them again",
                lost,
            )

    async def maintain(self) -> None:
        """Renew leases every ``renew_every`` seconds, at once after Redis comes
        back or restarts, and sooner while operations wait; until cancelled."""
        while True:
            self._wake = wake = anyio.Event()
            with anyio.move_on_after(self._next_renewal()):
                await wake.wait()
            await self.renew()

    def _next_renewal(self) -> float:
        state = self._breaker.state
        if state == "open":
            return min(self._renew_every, self._breaker.retry_in())
        if state == "half_open" or self._pending:
            return min(self._renew_every, self._breaker.reset_after)
        return self._renew_every

    def _lost_scripts(self) -> None:
        logger.warning("Redis lost the quota scripts (restart?); registering leases again")
        self._resync()

    def _resync(self) -> None:
        """Register the live leases again as soon as possible."""
        self._resyncs += 1
        if self._wake is not None:
            self._wake.set()

    # -- calls -----------------------------------------------------------------------

    def _now(self) -> str:
        return "" if self._clock is None else repr(float(self._clock()))

    def _failed(self, error: BaseException, what: str) -> None:
        self._failures += 1
        logger.debug("Redis quota store call failed during %s", what, exc_info=error)
        if self._breaker.failure():
            mode = "open on local limits" if self._on_failure.local is not None else "closed (503)"
            logger.warning(
                "Redis quota store unavailable (%s during %s: %s); failing %s",
                type(error).__name__,
                what,
                error,
                mode,
            )

    def _succeeded(self) -> None:
        if self._breaker.success():
            logger.warning("Redis quota store is back; registering live leases again")
            self._resync()

    async def snapshot(self, tenant: str, tier: TierSpec) -> TenantSnapshot:
        """See :meth:`QuotaStore.snapshot` (one read-only script call; raises
        the Redis error if Redis is unavailable)."""
        plan = self._book.plan(tier)
        lanes = list(plan.lanes)
        base = self._book.keys(tenant, "")
        lane_keys = [self._book.keys(tenant, lane).lane_bucket for lane in lanes]
        keys = (base.bucket, base.leases, base.costs, *lane_keys)
        reply = await self._scripts.call(SCRIPTS["inspect"], keys, (self._now(),))
        now = float(text(reply[0]))
        in_lane: dict[str, int] = {}
        for name in reply[3]:
            in_lane[text(name)] = in_lane.get(text(name), 0) + 1
        return TenantSnapshot(
            tenant,
            now,
            len(reply[3]),
            MappingProxyType(in_lane),
            None if plan.bucket is None else level_from(reply[1], plan.bucket),
            MappingProxyType(
                {
                    lane: level_from(raw, plan.lanes[lane])
                    for lane, raw in zip(lanes, reply[2], strict=True)
                }
            ),
        )

    def statistics(self) -> StoreStatistics:
        """See :meth:`QuotaStore.statistics`."""
        return StoreStatistics(
            backend="redis",
            admitted=self._admitted,
            refusals=MappingProxyType(dict(self._refusals)),
            in_flight=len(self._live),
            degraded=self._breaker.state != "closed",
            breaker=self._breaker.state,
            failures=self._failures,
            fallback_admitted=self._fallback_admitted,
            fallback_in_flight=sum(lease._local is not None for lease in self._live.values()),
            lost=self._lost,
            resyncs=self._resyncs,
            pending=len(self._pending),
        )
