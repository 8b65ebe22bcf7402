"""Per-tenant quotas: token buckets in cost units, the tenant table and its plan.

A thin face: the public names of this wing, re-exported from its modules.
"""

from __future__ import annotations

from slopolicy.core.quota.bucket import BucketStatistics as BucketStatistics
from slopolicy.core.quota.bucket import TokenBucket as TokenBucket
from slopolicy.core.quota.lease import Lease as Lease
from slopolicy.core.quota.refusals import QuotaRefusal as QuotaRefusal
from slopolicy.core.quota.tenants import QuotaStatistics as QuotaStatistics
from slopolicy.core.quota.tenants import TenantQuotas as TenantQuotas
from slopolicy.core.quota.tenants import TenantStatistics as TenantStatistics

__all__ = (
    "BucketStatistics",
    "Lease",
    "QuotaRefusal",
    "QuotaStatistics",
    "TenantQuotas",
    "TenantStatistics",
    "TokenBucket",
)
