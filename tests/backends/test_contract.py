"""The quota store contract, run against the memory store (asyncio and trio) and Redis."""

from __future__ import annotations

from slopolicy.testing.store_contract import QuotaStoreContract


class TestQuotaStoreContract(QuotaStoreContract):
    """Every contract test, once per store (see ``store`` in conftest.py)."""
