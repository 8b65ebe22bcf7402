"""Queue items for the fair-queue tests."""

from __future__ import annotations

import itertools

_numbers = itertools.count()


class Job:
    """A queued record. No ``__eq__``: the queue tells jobs apart by identity."""

    __slots__ = ("cost", "n", "tenant")

    def __init__(self, tenant: str = "a", cost: float = 0.0) -> None:
        self.n = next(_numbers)
        self.tenant = tenant
        self.cost = cost

    def __repr__(self) -> str:
        return f"Job({self.tenant!r}, {self.cost!r})"
