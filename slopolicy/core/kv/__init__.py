"""KV-cache admission: the block ledger, and the peak check of SIMULATOR.md.

A thin face: the public names of this wing, re-exported from its modules.
"""

from __future__ import annotations

from slopolicy.core.kv.ledger import KVReservation as KVReservation
from slopolicy.core.kv.peak import peak_fits as peak_fits
from slopolicy.core.kv.snapshot import KVStatistics as KVStatistics
from slopolicy.core.kv.turnover import Turnover as Turnover

__all__ = ("KVReservation", "KVStatistics", "Turnover", "peak_fits")
