"""Quota stores: where tenant token buckets and concurrency slots live.

- :class:`MemoryQuotaStore`: this process (the default; what a ``Gate``
  without a ``quota_store`` does through its policy).
- :class:`slopolicy.backends.redis.RedisQuotaStore`: shared by several gateway
  replicas (``pip install 'slopolicy[redis]'``; imported only from
  :mod:`slopolicy.backends.redis`, so this package never needs redis-py).

Both follow the :class:`QuotaStore` contract and pass the same contract
suite (:mod:`slopolicy.testing.store_contract`). :class:`FailOpen` and
:class:`FailClosed` say what a shared store does while its server is
unavailable; a :class:`CircuitBreaker` says when it tries again.
"""

from __future__ import annotations

from slopolicy.backends.base import Lease as Lease
from slopolicy.backends.base import QuotaStore as QuotaStore
from slopolicy.backends.base import StoreStatistics as StoreStatistics
from slopolicy.backends.base import TenantSnapshot as TenantSnapshot
from slopolicy.backends.failure import CircuitBreaker as CircuitBreaker
from slopolicy.backends.failure import FailClosed as FailClosed
from slopolicy.backends.failure import FailOpen as FailOpen
from slopolicy.backends.failure import FailurePolicy as FailurePolicy
from slopolicy.backends.memory import MemoryQuotaStore as MemoryQuotaStore

__all__ = (
    "CircuitBreaker",
    "FailClosed",
    "FailOpen",
    "FailurePolicy",
    "Lease",
    "MemoryQuotaStore",
    "QuotaStore",
    "StoreStatistics",
    "TenantSnapshot",
)
