"""Tenant quotas shared by several gateway replicas, in Redis.

::

    from slopolicy.backends.redis import RedisQuotaStore
    from slopolicy.backends import FailOpen

    store = RedisQuotaStore.from_url("redis://redis:6379/0", on_failure=FailOpen(share=1 / 3))
    async with store, Gate(config, quota_store=store) as gate:
        ...

Every replica's store keeps each tenant's token buckets and concurrency
leases in Redis, with :class:`~slopolicy.core.quota.tenants.TenantQuotas`' semantics.
An admission is **one round trip**: ``EVALSHA`` of one Lua script that purges
expired leases, checks the tenant and tenant-lane caps and both buckets, and
takes them all or none, atomically. Scripts ship as package data
(``slopolicy/backends/lua``), are loaded once per server and called by SHA1;
``NOSCRIPT`` (a restart, a failover, ``SCRIPT FLUSH``) loads them again.
A request's end (:meth:`RedisQuotaStore.finish`) is one more round trip: the
settle and the release scripts, pipelined.

The clock is Redis's ``TIME``, read inside the script, so replicas' clocks
never meet. Concurrency leases expire ``lease_ttl`` seconds after they were
last renewed; :meth:`RedisQuotaStore.maintain` (the Gate runs it) renews
this replica's live leases every ``renew_every`` seconds, so a crashed
replica's slots come back within ``lease_ttl``.

When Redis is down, slow or restarting, a :class:`~slopolicy.backends.CircuitBreaker`
stops calling it, and the failure policy answers: :class:`~slopolicy.backends.FailOpen`
(local limits, flagged) or :class:`~slopolicy.backends.FailClosed` (503). Releases
and settles that could not reach Redis wait and go through when it is back;
then the live leases are registered again (a restart may have lost them), so
nothing is double-counted or lost. Every script is idempotent: a retried
acquire grants nothing twice, a retried settle charges nothing twice.

redis-py's asyncio client runs on asyncio only (not trio). Needs
``pip install 'slopolicy[redis]'``.
"""

from __future__ import annotations

import itertools
import math
import secrets
from collections.abc import Callable
from types import TracebackType
from typing import Any

import anyio

try:
    from redis.asyncio import Redis
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "slopolicy.backends.redis needs redis-py: pip install 'slopolicy[redis]'"
    ) from error

from slopolicy.backends._redis_calls import (
    AcquireCall,
    KeyBook,
    RedisClient,
    Scripts,
    Token,
    text,
    token_of,
)
from slopolicy.backends._redis_upkeep import FAILURES, RedisUpkeep
from slopolicy.backends._scripts import SCRIPTS, check_prefix
from slopolicy.backends.base import (
    Lease,
    QuotaStore,
    check_acquire,
    check_cost,
    is_real,
    own_token,
    refusal_counts,
)
from slopolicy.backends.failure import CircuitBreaker, FailClosed, FailurePolicy
from slopolicy.core.quota.plan import TierPlan
from slopolicy.core.quota.refusals import (
    QuotaRefusal,
    concurrency_refusal,
    over_burst_refusal,
    rate_refusal,
)
from slopolicy.core.specs import TierSpec
from slopolicy.errors import UsageError

__all__ = ("RedisClient", "RedisQuotaStore")


class RedisQuotaStore(RedisUpkeep):
    """Tenant quota state in Redis, shared by every replica that points at it.

    Args:
        client: a ``redis.asyncio.Redis`` (or ``RedisCluster``) client. Its own
            retries run inside ``timeout``; :meth:`from_url` sets one quick retry.
        prefix: the first part of every key (no braces).
        lease_ttl: seconds a concurrency lease lives without renewal: how long
            a crashed replica's slots stay taken.
        renew_every: seconds between renewals (default ``lease_ttl / 3``).
        timeout: seconds one call to Redis may take before it counts as failed.
        on_failure: :class:`FailClosed` (default: 503 while Redis is
            unavailable) or :class:`FailOpen` (local limits, flagged).
        breaker: when to stop calling Redis and when to try again.
        clock: for tests only: seconds to use instead of Redis ``TIME``.
        key_grace: seconds idle keys outlive what they must hold (a bucket
            until it is full again, a lease set until its last lease expires).
        owns_client: close ``client`` in :meth:`aclose` (:meth:`from_url` sets it).
    """

    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str = "slopolicy",
        lease_ttl: float = 30.0,
        renew_every: float | None = None,
        timeout: float = 0.25,
        on_failure: FailurePolicy | None = None,
        breaker: CircuitBreaker | None = None,
        clock: Callable[[], float] | None = None,
        key_grace: float = 1.0,
        owns_client: bool = False,
    ) -> None:
        for name, value in (("lease_ttl", lease_ttl), ("timeout", timeout)):
            if not (is_real(value) and 0.0 < value < math.inf):
                raise UsageError(f"{name} must be finite seconds > 0, not {value!r}")
        if renew_every is None:
            renew_every = lease_ttl / 3
        if not (is_real(renew_every) and 0.0 < renew_every < lease_ttl):
            raise UsageError(
                f"renew_every must be > 0 and < lease_ttl ({lease_ttl!r} s), not {renew_every!r}"
            )
        if not (is_real(key_grace) and 0.0 <= key_grace < math.inf):
            raise UsageError(f"key_grace must be finite seconds >= 0, not {key_grace!r}")
        self._client = client
        self._owns_client = owns_client
        self._prefix = check_prefix(prefix)
        self._ttl = lease_ttl
        self._renew_every = renew_every
        self._timeout = timeout
        self._on_failure: FailurePolicy = FailClosed() if on_failure is None else on_failure
        self._breaker = CircuitBreaker() if breaker is None else breaker
        self._clock = clock
        self._grace = repr(float(key_grace))
        self._ttl_arg = repr(float(lease_ttl))
        self._replica = secrets.token_hex(6)
        self._ids = itertools.count(1)
        self._book = KeyBook(self._prefix)
        self._scripts = Scripts(client, timeout, self._lost_scripts)
        self._live: dict[str, Lease] = {}
        self._pending: dict[str, Lease] = {}
        self._wake: anyio.Event | None = None
        self._admitted = 0
        self._refusals = refusal_counts()
        self._failures = 0
        self._fallback_admitted = 0
        self._lost = 0
        self._resyncs = 0

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisQuotaStore:
        """A store with its own client for ``url`` (``redis://host:port/db``),
        closed by :meth:`aclose`. ``options`` go to the store."""
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        timeout = options.get("timeout", 0.25)
        if not (is_real(timeout) and 0.0 < timeout < math.inf):
            raise UsageError(f"timeout must be finite seconds > 0, not {timeout!r}")
        # One immediate retry reconnects a pooled connection a restart killed;
        # slower retries would only run into the store's own timeout.
        try:
            client = Redis.from_url(
                url,
                retry=Retry(NoBackoff(), 1),
                socket_connect_timeout=timeout,
                health_check_interval=0,
            )
        except (TypeError, ValueError) as error:  # not a redis:// URL, or a bad option in it
            raise UsageError(f"not a Redis URL: {url!r} ({error})") from error
        return cls(client, owns_client=True, **options)

    def __repr__(self) -> str:
        return (
            f"<RedisQuotaStore prefix={self._prefix!r} lease_ttl={self._ttl!r} "
            f"on_failure={self._on_failure!r} breaker={self._breaker.state}>"
        )

    async def aclose(self) -> None:
        """Send the releases and settles still waiting, if Redis answers (each
        call within ``timeout`` seconds; what cannot be sent expires with its
        lease), then close the client if this store made it (:meth:`from_url`)."""
        with anyio.CancelScope(shield=True):
            for lease in list(self._pending.values()):
                await self._push(lease)
            if self._owns_client:
                await self._client.aclose()

    async def __aenter__(self) -> RedisQuotaStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def renew_every(self) -> float:
        """Seconds between lease renewals."""
        return self._renew_every

    @property
    def breaker(self) -> CircuitBreaker:
        """The circuit breaker in front of Redis."""
        return self._breaker

    # -- admission -------------------------------------------------------------

    async def acquire(
        self, tenant: str, tier: TierSpec, lane: str, cost: float
    ) -> Lease | QuotaRefusal:
        """See :meth:`QuotaStore.acquire`: one ``EVALSHA`` round trip. While
        Redis is unavailable the failure policy answers instead."""
        check_acquire(tenant, tier, lane, cost)
        plan = self._book.plan(tier)
        split = plan.lanes.get(lane)
        over = cost > (plan.max_cost if split is None else split[1])
        admission = self._book.admission(tenant, lane, plan)
        lease = self._lease(tenant, lane, cost, admission)
        if not self._breaker.allow():
            if over:
                return self._refused(over_burst_refusal(tenant, plan, lane, cost))
            return await self._fall_back(lease, tier)
        args = (lease.id, repr(float(cost)), self._now(), self._ttl_arg, self._grace)
        flag = "1" if over else ""
        try:
            reply = await self._scripts.call(
                SCRIPTS["acquire"],
                admission.keys,
                (*args, *admission.within, flag, *admission.tail),
            )
        except FAILURES as error:
            self._failed(error, "acquire")
            if over:  # it could never be admitted anyway, and took nothing
                return self._refused(over_burst_refusal(tenant, plan, lane, cost))
            # Its reply is unknown: it may hold slots and cost in Redis. Undo
            # that once Redis answers again (a no-op if it never ran).
            token_of(lease).abort = lease._released = True
            self._pending[lease.id] = lease
            return await self._fall_back(self._lease(tenant, lane, cost, admission), tier)
        except BaseException:
            self._breaker.abandon()
            token_of(lease).abort = lease._released = True
            with anyio.CancelScope(shield=True):
                await self._push(lease)
            raise
        self._succeeded()
        return self._admitted_or_refused(lease, plan, [text(part) for part in reply], cost)

    def _admitted_or_refused(
        self, lease: Lease, plan: TierPlan, reply: list[str], cost: float
    ) -> Lease | QuotaRefusal:
        kind = reply[0]
        if kind == "ok":
            lease.acquired_at = float(reply[1])
            self._live[lease.id] = lease
            self._admitted += 1
            return lease
        tenant, lane = lease.tenant, lease.lane
        if kind == "over_burst":
            return self._refused(over_burst_refusal(tenant, plan, lane, cost))
        if kind == "concurrency":
            return self._refused(concurrency_refusal(tenant, int(reply[1]), int(reply[2])))
        if kind == "lane_concurrency":
            return self._refused(concurrency_refusal(tenant, int(reply[1]), int(reply[2]), lane))
        assert kind == "rate", reply
        wait, level, rate, burst = (float(part) for part in reply[2:6])
        where = lane if reply[1] == "lane" else None
        return self._refused(rate_refusal(tenant, where, rate, burst, cost, level, wait))

    def _lease(self, tenant: str, lane: str, cost: float, admission: AcquireCall) -> Lease:
        token = Token(admission.tenant_keys, admission.limits, cost)
        return Lease(self, f"{self._replica}:{next(self._ids)}", tenant, lane, cost, 0.0, token)

    def _refused(self, refusal: QuotaRefusal) -> QuotaRefusal:
        self._refusals[refusal.reason] += 1
        return refusal

    async def _fall_back(self, lease: Lease, tier: TierSpec) -> Lease | QuotaRefusal:
        """The failure policy's answer while Redis is unavailable."""
        answer = await self._on_failure.acquire(
            lease.tenant, tier, lease.lane, lease.cost, self._breaker.retry_in()
        )
        if isinstance(answer, QuotaRefusal):
            return self._refused(answer)
        token = token_of(lease)
        token.remote = False  # Redis holds nothing for it until renewal registers it
        lease._local = answer
        lease.acquired_at = answer.acquired_at
        self._live[lease.id] = lease
        self._admitted += 1
        self._fallback_admitted += 1
        return lease

    # -- settle and release ------------------------------------------------------

    async def settle(self, lease: Lease, actual_cost: float) -> None:
        """See :meth:`QuotaStore.settle`. A fallback lease settles on the local
        limits it was admitted on; a settle Redis cannot take now waits."""
        token = self._settling(lease, actual_cost, "settle")
        if lease._local is not None:
            await self._local().settle(lease._local, actual_cost)
            return
        token.settle_to = actual_cost
        await self._push(lease)

    async def release(self, lease: Lease) -> bool:
        """See :meth:`QuotaStore.release`. True the first time, at once on this
        side; a release Redis cannot take now waits, and the lease's ttl bounds
        how long its slots stay taken if Redis never answers again."""
        token = own_token(lease, self, Token, "release")
        if lease._released:
            return False
        self._let_go(lease)
        if lease._local is not None:
            await self._local().release(lease._local)
            lease.released_at = lease._local.released_at
        if token.remote:
            token.release = True
            await self._push(lease)
        return True

    async def finish(self, lease: Lease, actual_cost: float) -> bool:
        """See :meth:`QuotaStore.finish`: the settle and the release reach Redis
        pipelined in one round trip (or wait together, as they would apart). A
        fallback lease settles and releases on the local limits it was admitted
        on. A bad ``actual_cost`` raises after the release: its slots never stay
        taken for a bad number."""
        try:
            check_cost("actual_cost", actual_cost)
        except UsageError:
            await self.release(lease)  # the charge stays the estimate
            raise
        token = self._settling(lease, actual_cost, "finish")
        self._let_go(lease)
        if lease._local is not None:
            await self._local().finish(lease._local, actual_cost)
            lease.released_at = lease._local.released_at
        else:
            token.settle_to = actual_cost
        if token.remote:
            token.release = True
        if token.settle_to is not None or token.release:
            await self._push(lease)
        return True

    def _settling(self, lease: Lease, actual_cost: float, action: str) -> Token:
        """Check a settle of ``lease`` (ours, live, a good cost); record the cost."""
        token = own_token(lease, self, Token, action)
        if lease._released:
            raise UsageError(f"cannot settle a released lease: {lease!r}")
        check_cost("actual_cost", actual_cost)
        lease._cost = actual_cost
        return token

    def _let_go(self, lease: Lease) -> None:
        """Mark ``lease`` released on this side (its slots go back at once here)."""
        lease._released = True
        del self._live[lease.id]

    def _local(self) -> QuotaStore:
        """The failure policy's local store, which holds every fallback lease."""
        local = self._on_failure.local
        assert local is not None  # only a fail-open policy makes fallback leases
        return local
