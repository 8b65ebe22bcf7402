"""Custom routing rules: what a rule sees (:class:`RouteContext`) and answers (:class:`Verdict`).

A :data:`RoutingRule` is a callable the :class:`~slopolicy.core.routing.router.LaneRouter`
runs in each lane it visits, after the lane's own caps; it returns a
:class:`Verdict` (demote, defer, reject or rewrite the request) or ``None``
to let the request pass.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from slopolicy.core.cost.estimator import TokenEstimate
from slopolicy.core.reasons import Reason
from slopolicy.core.request import Request
from slopolicy.core.specs import LaneSpec, TierSpec

__all__ = ("RouteContext", "RoutingRule", "Verdict", "VerdictKind", "rule_name")


class VerdictKind(enum.Enum):
    """What a rule wants done with the request in the current lane."""

    DEMOTE = "demote"
    DEFER = "defer"
    REJECT = "reject"
    REWRITE = "rewrite"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A rule's answer. Build one with the class methods."""

    kind: VerdictKind
    note: str
    reason: Reason = Reason.RULE
    retry_after: float | None = None
    http_status: int | None = None
    request: Request | None = None
    required: bool = True

    @classmethod
    def demote(cls, note: str, *, reason: Reason = Reason.RULE, required: bool = True) -> Verdict:
        """Move to the next lower lane. With ``required=False`` the request stays
        when there is none; otherwise it is rejected."""
        return cls(VerdictKind.DEMOTE, note, reason, required=required)

    @classmethod
    def defer(
        cls, note: str, retry_after: float, *, reason: Reason = Reason.RULE, http_status: int = 503
    ) -> Verdict:
        """Answer "not now, retry after ``retry_after`` seconds"."""
        return cls(
            VerdictKind.DEFER, note, reason, retry_after=retry_after, http_status=http_status
        )

    @classmethod
    def reject(cls, note: str, *, reason: Reason = Reason.RULE, http_status: int = 403) -> Verdict:
        """Refuse the request as it stands."""
        return cls(VerdictKind.REJECT, note, reason, http_status=http_status)

    @classmethod
    def rewrite(cls, request: Request, note: str) -> Verdict:
        """Continue with ``request`` instead (same prompt; limits or features changed)."""
        return cls(VerdictKind.REWRITE, note, request=request)


@dataclass(frozen=True, slots=True)
class RouteContext:
    """What a rule sees in one lane.

    ``request`` has this lane's transforms applied; ``original`` is as
    submitted. ``cost`` is in cost units; ``lower_lane`` is where a demotion
    would go (``None`` in the last lane the tier may use).
    """

    request: Request
    original: Request
    lane: LaneSpec
    tier: TierSpec
    prompt: TokenEstimate
    cost: float
    lower_lane: str | None


#: A custom rule: return a :class:`Verdict`, or ``None`` to let the request pass.
RoutingRule = Callable[[RouteContext], "Verdict | None"]


def rule_name(rule: RoutingRule) -> str:
    """A rule's name in the steps it adds: its ``__name__``, else its type's."""
    return getattr(rule, "__name__", type(rule).__name__)
