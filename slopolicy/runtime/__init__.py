"""The anyio runtime: the :class:`Gate` that serving code awaits, its tickets,
the arrival log and HTTP helpers. Works on asyncio and trio.

Importing :mod:`slopolicy.core` never imports this package (nor anyio).
"""

from __future__ import annotations

from slopolicy.runtime.arrivals import ArrivalLog as ArrivalLog
from slopolicy.runtime.arrivals import ArrivalRecord as ArrivalRecord
from slopolicy.runtime.gate import Gate as Gate
from slopolicy.runtime.gate import GateStatistics as GateStatistics
from slopolicy.runtime.gate import SignalSource as SignalSource
from slopolicy.runtime.ticket import Ticket as Ticket
from slopolicy.runtime.ticket import TrackedStream as TrackedStream
from slopolicy.runtime.tools import ToolCall as ToolCall
from slopolicy.runtime.waiting import GateAdmission as GateAdmission

__all__ = (
    "ArrivalLog",
    "ArrivalRecord",
    "Gate",
    "GateAdmission",
    "GateStatistics",
    "SignalSource",
    "Ticket",
    "ToolCall",
    "TrackedStream",
)
