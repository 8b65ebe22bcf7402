"""Decision values: what the policy decided about a request, and why.

A decision is a small frozen value, never an exception (h11 style): match on
its type. Every decision carries a machine-readable :class:`Reason`, a
sentence for people, the HTTP status a gateway should answer with, a
``retry_after`` in seconds where waiting would help, and the ordered
:class:`Step` list of the rules that fired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple, TypeAlias

from slopolicy.core.fast_init import fast_init
from slopolicy.core.outcome import Finished
from slopolicy.core.reasons import Reason
from slopolicy.core.request import Request

__all__ = (
    "Admit",
    "Decision",
    "Defer",
    "Demote",
    "Displaced",
    "Reason",
    "Reject",
    "Step",
    "explain",
)


class Step(NamedTuple):
    """One rule that fired while deciding: which rule, in which lane, what it did.

    ``detail`` is ``template`` formatted with ``args`` (``str.format``), done
    only when read: decisions are made per request, explanations rarely.
    """

    rule: str
    lane: str | None
    template: str
    args: tuple[object, ...] = ()

    @property
    def detail(self) -> str:
        """What the rule did, in a sentence."""
        return self.template.format(*self.args) if self.args else self.template

    def __str__(self) -> str:
        where = f" [{self.lane}]" if self.lane else ""
        return f"{self.rule}{where}: {self.detail}"


def explain(steps: tuple[Step, ...], message: str) -> str:
    """A numbered, human-readable account of ``steps`` ending in ``message``."""
    lines = [f"{index}. {step}" for index, step in enumerate(steps, 1)]
    lines.append(f"=> {message}")
    return "\n".join(lines)


class _Explained:
    __slots__ = ()
    steps: tuple[Step, ...]
    message: str

    def explain(self) -> str:
        """The rules that fired, in order, and the outcome."""
        return explain(self.steps, self.message)


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Admit(_Explained):
    """Accepted into ``lane`` as requested (or as the tier's default lane).

    ``request`` is the request after the lane's transforms (capped
    ``max_new_tokens``); ``cost`` is its cost score in cost units;
    ``displaced`` is the queued request its arrival pushed out of the lane's
    full queue, if any (its caller must be told: see :class:`Displaced`).
    """

    lane: str
    tier: str
    request: Request
    prompt_tokens: int
    cost: float
    message: str
    steps: tuple[Step, ...] = ()
    reason: Reason = Reason.ADMITTED
    rungs: tuple[str, ...] = ()
    displaced: Displaced | None = None
    http_status: ClassVar[int] = 200
    retry_after: ClassVar[None] = None
    accepted: ClassVar[bool] = True


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Demote(_Explained):
    """Accepted, but into ``lane``, lower than the ``from_lane`` it started in
    (``displaced`` as for :class:`Admit`)."""

    lane: str
    from_lane: str
    tier: str
    request: Request
    prompt_tokens: int
    cost: float
    message: str
    reason: Reason
    steps: tuple[Step, ...] = ()
    rungs: tuple[str, ...] = ()
    displaced: Displaced | None = None
    http_status: ClassVar[int] = 200
    retry_after: ClassVar[None] = None
    accepted: ClassVar[bool] = True


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Defer(_Explained):
    """Not now: the same request is expected to succeed later, after
    ``retry_after`` seconds when that can be known (``None`` otherwise).

    Gateways answer ``http_status`` (503, or 429 when the tenant's own quota is
    the cause), with a ``Retry-After`` header when ``retry_after`` is set.
    ``prompt_tokens`` is the prompt's length in tokens when it was counted
    before the refusal (``None`` when refused first).
    """

    reason: Reason
    message: str
    retry_after: float | None
    http_status: int = 503
    lane: str | None = None
    steps: tuple[Step, ...] = ()
    prompt_tokens: int | None = None
    accepted: ClassVar[bool] = False


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Reject(_Explained):
    """Refused as it stands: retrying the same request will not help.

    ``http_status`` is a 4xx a gateway can send unchanged. ``prompt_tokens``
    is the prompt's length in tokens when it was counted before the refusal
    (``None`` when refused first, e.g. for an unknown tier or lane).
    """

    reason: Reason
    message: str
    http_status: int
    lane: str | None = None
    steps: tuple[Step, ...] = ()
    prompt_tokens: int | None = None
    retry_after: ClassVar[None] = None
    accepted: ClassVar[bool] = False


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Displaced:
    """A queued request pushed out of its lane's full queue to make room for a
    request of a tenant with fewer waiting (DESIGN.md invariant 9).

    It has ended: ``finished`` is its record (outcome ``rejected``; its quota
    settled at no cost, nothing else was held), and ``refusal`` is the
    ``queue_full`` :class:`Defer` (503, Retry-After the lane's longest wait)
    to answer its caller with. It reaches the caller only through the
    decision that displaced it, as an expiry does through ``dispatch``.
    """

    finished: Finished
    refusal: Defer


#: What routing a request can produce.
Decision: TypeAlias = Admit | Demote | Defer | Reject
