"""The tool pool's statistics: a frozen :class:`ToolPoolStatistics` read from its state.

A pure read of the :class:`~slopolicy.core.tools.state.Group` records the
:class:`~slopolicy.core.tools.pool.ToolPool` owns; nothing here changes them.
"""

from __future__ import annotations

from collections.abc import Mapping

from slopolicy.core.tools.calls import ToolPoolStatistics, ToolStatistics
from slopolicy.core.tools.rates import RollingRates
from slopolicy.core.tools.state import Group

__all__ = ("pool_statistics",)


def pool_statistics(
    groups: Mapping[str, Group],
    rates: RollingRates,
    in_flight: int,
    waiting: int,
    tenants: int,
    *,
    now: float,
) -> ToolPoolStatistics:
    """The snapshot at ``now`` (monotonic seconds) of a pool with ``groups``
    (tool name to its state), pool-wide ``rates``, and ``in_flight`` calls,
    ``waiting`` calls and ``tenants`` tenants in all."""
    tools = []
    for name, group in groups.items():
        calls, timeouts, errors = group.rates.rates(now=now)
        tools.append(
            ToolStatistics(
                name=name,
                in_flight=group.in_flight,
                waiting=group.waiting,
                started=group.started,
                ended=dict(group.ended),
                refused=dict(group.refused),
                calls=calls,
                timeout_rate=timeouts,
                error_rate=errors,
            )
        )
    _, timeouts, errors = rates.rates(now=now)
    return ToolPoolStatistics(
        tools=tuple(tools),
        in_flight=in_flight,
        waiting=waiting,
        tenants=tenants,
        timeout_rate=timeouts,
        error_rate=errors,
    )
