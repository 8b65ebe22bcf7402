"""A hold on a tenant's quota: one class for the core's table and every store."""

from __future__ import annotations

__all__ = ("Lease",)


class Lease:
    """One admitted request's hold on its tenant's quota: granted by a
    :class:`~slopolicy.core.quota.tenants.TenantQuotas` table or a
    :class:`~slopolicy.backends.QuotaStore`, and given back to it.

    Attributes:
        id: unique among its grantor's leases (Redis: unique across replicas).
        tenant: who holds it.
        lane: the lane it was admitted to.
        acquired_at: when it was granted, in seconds on the grantor's clock
            (a table's ``now``; Redis: server time, unless a test clock was
            injected).
        released_at: when its slots were given back on that clock, or ``None``
            while held (and when a store could not confirm the release).
    """

    __slots__ = (
        "_cost",
        "_local",
        "_owner",
        "_released",
        "_token",
        "acquired_at",
        "id",
        "lane",
        "released_at",
        "tenant",
    )

    def __init__(
        self,
        owner: object,
        id: str,
        tenant: str,
        lane: str,
        cost: float,
        acquired_at: float,
        token: object = None,
    ) -> None:
        self._owner = owner
        self.id = id
        self.tenant = tenant
        self.lane = lane
        self._cost = cost
        self.acquired_at = acquired_at
        self.released_at: float | None = None
        self._released = False
        self._token = token
        # A fail-open store's fallback lease, when admitted on local limits.
        self._local: Lease | None = None

    def __repr__(self) -> str:
        fallback = ", fallback=True" if self._local is not None else ""
        return (
            f"Lease(id={self.id!r}, tenant={self.tenant!r}, lane={self.lane!r}, "
            f"cost={self._cost!r}, released={self._released!r}{fallback})"
        )

    @property
    def cost(self) -> float:
        """Cost units charged for the request: the estimate, then the settled cost."""
        return self._cost

    @property
    def released(self) -> bool:
        """Whether the concurrency slots have been given back."""
        return self._released

    @property
    def fallback(self) -> bool:
        """Whether a fail-open store admitted it on local limits because the
        shared store was unavailable (never for a table's own lease)."""
        return self._local is not None
