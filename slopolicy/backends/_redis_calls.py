"""The Redis quota store's plumbing: calls to Redis, and per-lease and per-tier bookkeeping.

:class:`Scripts` runs the Lua scripts by SHA1 (``EVALSHA``), loads them on
``NOSCRIPT`` and reports a server that lost them (a restart); every call has
a deadline. :class:`KeyBook` caches tier plans, their signatures and each
tenant's keys. :class:`Token` is a lease's Redis side.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import anyio
from redis.exceptions import NoScriptError

from slopolicy.backends._scripts import SCRIPTS, Script, TenantKeys, tenant_keys
from slopolicy.backends.base import Lease
from slopolicy.core.quota.plan import TierPlan
from slopolicy.core.specs import TierSpec

__all__ = (
    "AcquireCall",
    "KeyBook",
    "RedisClient",
    "Scripts",
    "Token",
    "level_from",
    "limits_of",
    "text",
    "token_of",
)

logger = logging.getLogger("slopolicy.backends.redis")


class RedisClient(Protocol):
    """What the store uses of a redis-py asyncio client (``Redis`` or ``RedisCluster``)."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        """Send one command and return its reply."""
        ...

    def pipeline(self, transaction: bool = ..., shard_hint: Any = ...) -> Any:
        """A pipeline: commands queued, then sent in one round trip."""
        ...

    async def aclose(self) -> None:
        """Close the client's connections."""
        ...


class Token:
    """A lease's Redis side: its keys and limits, the charge Redis holds for
    it, whether Redis holds its slots, and operations waiting to go through."""

    __slots__ = ("abort", "args", "charged", "keys", "release", "remote", "settle_to")

    def __init__(self, keys: TenantKeys, args: tuple[str, ...], cost: float) -> None:
        self.keys = keys
        self.args = args  # rate, burst, lane rate, lane burst
        self.charged = cost
        self.remote = True
        self.settle_to: float | None = None
        self.release = False
        self.abort = False


def text(value: object) -> str:
    """A reply part as ``str`` (redis-py returns bytes unless told to decode)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def token_of(lease: Lease) -> Token:
    """The Redis side of a lease this store granted."""
    token = lease._token
    assert isinstance(token, Token)
    return token


def level_from(raw: list[Any], limits: tuple[float, float]) -> float:
    """A bucket's level from the inspect script; a missing bucket is full."""
    return float(text(raw[0])) if raw else limits[1]


def limits_of(plan: TierPlan, lane: str) -> tuple[str, ...]:
    """ARGV for the scripts: tenant rate and burst, lane rate and burst (cost
    units/s, cost units), ``""`` for a bucket the plan does not have."""
    bucket, split = plan.bucket, plan.lanes.get(lane)
    return (
        *(("", "") if bucket is None else (repr(bucket[0]), repr(bucket[1]))),
        *(("", "") if split is None else (repr(split[0]), repr(split[1]))),
    )


class Scripts:
    """Runs the scripts on ``client``, each call within ``timeout`` seconds.
    ``on_lost`` is called when the server turns out to have lost the scripts
    it had (restart, failover, ``SCRIPT FLUSH``): it may have lost data too."""

    def __init__(self, client: RedisClient, timeout: float, on_lost: Callable[[], None]) -> None:
        self.client = client
        self.timeout = timeout
        self._on_lost = on_lost
        self.loaded = False

    async def call(self, script: Script, keys: Sequence[str], args: Sequence[str]) -> Any:
        """:meth:`eval`, within ``timeout`` seconds (else TimeoutError)."""
        with anyio.fail_after(self.timeout):
            return await self.eval(script, keys, args)

    async def eval(self, script: Script, keys: Sequence[str], args: Sequence[str]) -> Any:
        """Run ``script`` by SHA1, loading the scripts first if the server lacks them."""
        client = self.client
        try:
            reply = await client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            await self.load()
            return await client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        # The server has the scripts (loaded by us or another replica): a
        # NOSCRIPT from here on means it lost them.
        self.loaded = True
        return reply

    async def load(self) -> None:
        """Load every script on the server (``SCRIPT LOAD``)."""
        if self.loaded:
            # They were loaded: Redis restarted, failed over or flushed them,
            # and may have lost the leases too.
            logger.warning("Redis lost the quota scripts (restart?); registering leases again")
            self._on_lost()
        for script in SCRIPTS.values():
            await self.client.execute_command("SCRIPT LOAD", script.source)
        self.loaded = True

    async def pipeline(
        self, script: Script, calls: Sequence[tuple[Sequence[str], Sequence[str]]]
    ) -> list[list[str]]:
        """Run ``script`` once per (keys, args) in one pipelined round trip,
        within ``timeout`` seconds; each reply as a list of ``str``."""
        return await self.batch([(script, keys, args) for keys, args in calls])

    async def batch(
        self, calls: Sequence[tuple[Script, Sequence[str], Sequence[str]]]
    ) -> list[list[str]]:
        """Run each (script, keys, args), in order, in one pipelined round trip
        (not a transaction: Cluster may route them apart), within ``timeout``
        seconds; each reply as a list of ``str``."""
        for attempt in range(2):
            with anyio.fail_after(self.timeout):
                pipe = self.client.pipeline(transaction=False)
                for script, keys, args in calls:
                    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
                replies = await pipe.execute(raise_on_error=False)
            if attempt == 0 and any(isinstance(reply, NoScriptError) for reply in replies):
                with anyio.fail_after(self.timeout):
                    await self.load()
                continue
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            return [[text(part) for part in reply] for reply in replies]
        raise AssertionError("unreachable")  # pragma: no cover

    async def ping(self) -> None:
        """``PING``, within ``timeout`` seconds."""
        with anyio.fail_after(self.timeout):
            await self.client.execute_command("PING")


class AcquireCall:
    """What an acquire of one (tenant, lane) under one plan always sends: the
    KEYS (its five, then the plan's other lane buckets), the ARGV for the
    limits, caps and lane (before the over-burst flag), and the ARGV after it
    (the plan's signature, the other lane buckets' limits)."""

    __slots__ = ("keys", "limits", "plan", "tail", "tenant_keys", "within")

    def __init__(self, tenant: str, lane: str, plan: TierPlan, book: KeyBook) -> None:
        self.plan = plan
        self.tenant_keys = keys = book.keys(tenant, lane)
        others = [(other, limits) for other, limits in plan.lanes.items() if other != lane]
        self.keys = (*keys.all(), *(book.keys(tenant, other).lane_bucket for other, _ in others))
        self.limits = limits_of(plan, lane)
        caps = (
            "" if plan.max_concurrency is None else str(plan.max_concurrency),
            str(plan.caps[lane]) if lane in plan.caps else "",
        )
        self.within = (*self.limits, *caps, lane)
        self.tail = (
            book.signature(plan),
            *(repr(number) for _, limits in others for number in limits),
        )


class KeyBook:
    """Tier plans (validated once), their signatures, and tenants' keys, cached."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._plan_cache: dict[int, TierPlan] = {}
        self._signatures: dict[int, tuple[TierPlan, str]] = {}
        self._key_cache: dict[tuple[str, str], TenantKeys] = {}
        self._admissions: dict[tuple[str, str], AcquireCall] = {}

    def admission(self, tenant: str, lane: str, plan: TierPlan) -> AcquireCall:
        """The constant part of an acquire for ``tenant`` in ``lane`` under ``plan``."""
        admission = self._admissions.get((tenant, lane))
        if admission is None or admission.plan is not plan:
            if len(self._admissions) >= 4096:
                self._admissions.clear()
            admission = AcquireCall(tenant, lane, plan, self)
            self._admissions[tenant, lane] = admission
        return admission

    def plan(self, tier: TierSpec) -> TierPlan:
        """``tier``'s validated plan."""
        plan = self._plan_cache.get(id(tier))
        if plan is None or plan.tier is not tier:
            plan = TierPlan(tier)
            if len(self._plan_cache) >= 256:
                self._plan_cache.clear()
            self._plan_cache[id(tier)] = plan
        return plan

    def signature(self, plan: TierPlan) -> str:
        """A short name for the plan's limits: the tenant bucket records the
        one it was last carried to, so a tier change is seen in one HGET."""
        signature = self._signatures.get(id(plan))
        if signature is None or signature[0] is not plan:
            text = repr((plan.bucket, sorted(plan.lanes.items())))
            signature = (plan, hashlib.sha1(text.encode()).hexdigest()[:16])
            if len(self._signatures) >= 256:
                self._signatures.clear()
            self._signatures[id(plan)] = signature
        return signature[1]

    def keys(self, tenant: str, lane: str) -> TenantKeys:
        """The keys of ``tenant`` in ``lane``."""
        keys = self._key_cache.get((tenant, lane))
        if keys is None:
            if len(self._key_cache) >= 4096:
                self._key_cache.clear()
            keys = self._key_cache[tenant, lane] = tenant_keys(self._prefix, tenant, lane)
        return keys
