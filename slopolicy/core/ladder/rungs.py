"""Rungs of the fallback ladder: what each level of degradation does.

A :class:`Rung` acts in one or more of four ways:

* on the request: ``transform(request, lane) -> Request``, a pure function
  (same input, same output; the frozen input is never changed) applied to
  requests routed to ``lanes`` (``None``: every lane);
* as a marker: ``marker=True`` changes nothing but is listed for every request
  in ``lanes``, so the host acts itself (e.g. compresses the prompt);
* on dispatch order: ``favor_lanes`` go first (their queued heads that have
  waited ``favor_after`` of their TTFT target are offered before any other
  lane's, whatever the fair shares), which refuses and degrades nothing;
* on admission: ``pause_lanes`` are held (queue, do not start), and ``shed``
  refuses every lane outside ``keep_lanes`` with a ``Retry-After``.

The seven built-in rungs, mildest first (:data:`BUILTIN_RUNGS`: the seed's
order, after a first rung that only reorders):

| rung | acts on | effect |
|---|---|---|
| ``favor_interactive`` | dispatch | interactive lanes' queued requests at risk start first |
| ``drop_optional_features`` | every lane | ``n`` 1; no ``best_of``, ``logprobs``; effort <= low |
| ``cap_max_new_tokens`` | interactive lanes | ``max_new_tokens`` -> ``min(current, cap)`` |
| ``compress_prompt`` | every lane | the host's ``compress`` hook; without one, a marker |
| ``cheaper_model`` | ``downgrade_lanes`` | ``model`` -> ``cheaper_model`` (no-op when unset) |
| ``pause_background`` | admission | new requests in ``pause_lanes`` are held |
| ``shed`` | admission | lanes but the interactive ones: 503 + ``Retry-After`` (by share) |

``reasoning_effort`` is capped at ``"low"`` rather than cleared: ``None``
means the model's default, which for reasoning models is usually ``medium``,
so clearing it could raise the cost it is meant to cut.

Shedding follows Google SRE's criticality order: the lowest lanes go first
(``pause_background`` holds the background lanes one rung earlier), and
``shed`` then refuses everything below the interactive lanes; the policy
sheds by share (of each tenant, the part of its requests beyond its max-min
share: ``admission(lane, shed=False)`` spares the rest). The interactive
lanes are what the ladder protects, so no built-in rung refuses them; quotas,
queue bounds and the KV reserve guard them instead.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from slopolicy.core.checks import is_number
from slopolicy.core.request import REASONING_EFFORTS, Request
from slopolicy.errors import UsageError

__all__ = (
    "BUILTIN_RUNGS",
    "FAVOR_AFTER",
    "AdmissionAction",
    "CapMaxNewTokens",
    "CompressPrompt",
    "DropOptionalFeatures",
    "Rung",
    "Transform",
    "UseModel",
    "default_rungs",
)

#: The built-in rungs, mildest first: one that only reorders dispatch, then
#: the seed's order.
BUILTIN_RUNGS = (
    "favor_interactive",
    "drop_optional_features",
    "cap_max_new_tokens",
    "compress_prompt",
    "cheaper_model",
    "pause_background",
    "shed",
)

#: ``favor_interactive``'s default :attr:`Rung.favor_after`: a quarter of the
#: TTFT target, the wait the queue-wait trigger calls healthy (its default
#: exit), so the rung puts first only the requests that have waited longer.
FAVOR_AFTER = 0.25

#: A pure request transform: ``(request, lane) -> request`` (the same one when
#: nothing changes). ``lane`` is the lane the request was routed to.
Transform = Callable[[Request, str], Request]

_EFFORT_RANK = {"minimal": 0, "low": 1, "medium": 2, "high": 3}


class AdmissionAction(enum.Enum):
    """What an admission rung does to a lane's new requests."""

    PAUSE = "pause"  # hold: queue, but start nothing from the lane
    SHED = "shed"  # refuse now, with a Retry-After


def _lanes(name: str, lanes: Iterable[str]) -> frozenset[str]:
    if isinstance(lanes, str):  # a lone name would become a set of letters
        raise UsageError(f"{name}: expected lane names, got the string {lanes!r}")
    result = frozenset(lanes)
    if not all(isinstance(lane, str) and lane for lane in result):
        raise UsageError(f"{name}: lane names must be non-empty strings")
    return result


@dataclass(frozen=True, slots=True)
class Rung:
    """One level of degradation.

    Attributes:
        name: unique within a ladder.
        transform: pure request transform, or ``None``.
        lanes: lanes ``transform`` and ``marker`` apply to (``None``: every lane).
        marker: list this rung for each request in ``lanes`` without changing
            it, so the host can act (exclusive with ``transform``).
        favor_lanes: lanes whose queued requests start before any other
            lane's while the rung is active (fair shares set aside, nothing
            refused), once each has waited ``favor_after`` of its lane's TTFT target.
        favor_after: the fraction (0-1) of its lane's TTFT target a queued
            request of ``favor_lanes`` has waited before the rung puts it
            first (0: at once; a lane without a TTFT target: at once). A
            request with most of its budget left starts in the usual order,
            so the rung takes starts from the other lanes only for the
            favoured lane's requests at risk of missing.
        pause_lanes: lanes whose new requests are held while the rung is active.
        shed: refuse every lane outside ``keep_lanes`` while active.
        keep_lanes: lanes ``shed`` spares.
        retry_after: ``Retry-After`` for this rung's holds and refusals, in
            seconds (``None``: the ladder's cooldown, the soonest it can step down).
    """

    name: str
    transform: Transform | None = None
    lanes: frozenset[str] | None = None
    marker: bool = False
    favor_lanes: frozenset[str] = frozenset()
    favor_after: float = 0.0
    pause_lanes: frozenset[str] = frozenset()
    shed: bool = False
    keep_lanes: frozenset[str] = frozenset()
    retry_after: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UsageError("a rung needs a non-empty name")
        where = f"rung {self.name!r}"
        if self.transform is not None and not callable(self.transform):
            raise UsageError(f"{where}: transform must be callable")
        if self.transform is not None and self.marker:
            raise UsageError(f"{where}: a marker rung has no transform")
        if self.lanes is not None:
            object.__setattr__(self, "lanes", _lanes(f"{where} lanes", self.lanes))
        object.__setattr__(self, "favor_lanes", _lanes(f"{where} favor_lanes", self.favor_lanes))
        object.__setattr__(self, "pause_lanes", _lanes(f"{where} pause_lanes", self.pause_lanes))
        object.__setattr__(self, "keep_lanes", _lanes(f"{where} keep_lanes", self.keep_lanes))
        if not (is_number(self.favor_after) and 0 <= self.favor_after <= 1):
            raise UsageError(f"{where}: favor_after must be a number from 0 to 1")
        if self.keep_lanes and not self.shed:
            raise UsageError(f"{where}: keep_lanes only applies with shed=True")
        if self.retry_after is not None and not (
            isinstance(self.retry_after, (int, float))
            and math.isfinite(self.retry_after)
            and self.retry_after > 0
        ):
            raise UsageError(f"{where}: retry_after must be a positive number of seconds")

    def covers(self, lane: str) -> bool:
        """Whether ``transform`` or ``marker`` applies to requests in ``lane``."""
        return self.lanes is None or lane in self.lanes

    def admission(self, lane: str, *, shed: bool = True) -> AdmissionAction | None:
        """What this rung does to a new request in ``lane`` (shed wins over
        pause); ``shed=False``: one its shedding spares."""
        if shed and self.shed and lane not in self.keep_lanes:
            return AdmissionAction.SHED
        if lane in self.pause_lanes:
            return AdmissionAction.PAUSE
        return None


@dataclass(frozen=True, slots=True)
class DropOptionalFeatures:
    """Transform: one sequence, no ``best_of``, no ``logprobs``, and
    ``reasoning_effort`` no higher than ``reasoning_effort``."""

    reasoning_effort: str = "low"

    def __post_init__(self) -> None:
        if self.reasoning_effort not in REASONING_EFFORTS:
            raise UsageError(f"reasoning_effort: expected one of {sorted(REASONING_EFFORTS)}")

    def __call__(self, request: Request, lane: str) -> Request:
        changes: dict[str, object] = {}
        if request.n != 1:
            changes["n"] = 1
        if request.best_of is not None:
            changes["best_of"] = None
        if request.logprobs is not None:
            changes["logprobs"] = None
        effort = request.reasoning_effort
        if effort is not None and _EFFORT_RANK[effort] > _EFFORT_RANK[self.reasoning_effort]:
            changes["reasoning_effort"] = self.reasoning_effort
        return request.replace(**changes) if changes else request


@dataclass(frozen=True, slots=True)
class CapMaxNewTokens:
    """Transform: ``max_new_tokens`` -> ``min(current, cap)`` (tokens)."""

    cap: int

    def __post_init__(self) -> None:
        if isinstance(self.cap, bool) or not isinstance(self.cap, int) or self.cap < 1:
            raise UsageError(f"max_new_tokens cap must be a positive integer, got {self.cap!r}")

    def __call__(self, request: Request, lane: str) -> Request:
        if request.max_new_tokens <= self.cap:
            return request
        return request.replace(max_new_tokens=self.cap)


@dataclass(frozen=True, slots=True)
class CompressPrompt:
    """Transform: the host's ``compress(request) -> request`` hook (which must
    be pure: summarise or truncate the prompt, recount ``prompt_tokens``)."""

    compress: Callable[[Request], Request]

    def __call__(self, request: Request, lane: str) -> Request:
        return self.compress(request)


@dataclass(frozen=True, slots=True)
class UseModel:
    """Transform: ``model`` -> this model."""

    model: str

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise UsageError("cheaper_model must be a non-empty model name")

    def __call__(self, request: Request, lane: str) -> Request:
        if request.model == self.model:
            return request
        return request.replace(model=self.model)


def default_rungs(
    *,
    interactive_lanes: Iterable[str],
    max_new_tokens: int = 256,
    compress: Callable[[Request], Request] | None = None,
    compress_lanes: Iterable[str] | None = None,
    cheaper_model: str | None = None,
    downgrade_lanes: Iterable[str] = (),
    pause_lanes: Iterable[str] = (),
    shed_retry_after: float = 5.0,
    reasoning_effort: str = "low",
    favor_after: float = FAVOR_AFTER,
    order: Sequence[str] = BUILTIN_RUNGS,
) -> tuple[Rung, ...]:
    """The built-in rungs from plain values, picked and ordered by ``order``.

    Args:
        interactive_lanes: lanes ``favor_interactive`` puts first,
            ``cap_max_new_tokens`` caps and ``shed`` spares (at least one).
        max_new_tokens: the cap, in tokens.
        compress: prompt-compression hook; without one ``compress_prompt`` is a marker.
        compress_lanes: lanes ``compress_prompt`` applies to (``None``: every lane).
        cheaper_model: model for ``downgrade_lanes``; ``None`` keeps the rung as a no-op.
        downgrade_lanes: lanes sent to ``cheaper_model``.
        pause_lanes: lanes ``pause_background`` holds.
        shed_retry_after: ``Retry-After`` given by ``shed``, in seconds.
        reasoning_effort: highest effort ``drop_optional_features`` leaves.
        favor_after: ``favor_interactive``'s :attr:`Rung.favor_after`.
        order: names from :data:`BUILTIN_RUNGS`, in climbing order.
    """
    interactive = _lanes("interactive_lanes", interactive_lanes)
    if not interactive:
        raise UsageError("interactive_lanes: name at least one lane for the ladder to protect")
    compress_scope = None if compress_lanes is None else _lanes("compress_lanes", compress_lanes)
    built = {
        "favor_interactive": Rung(
            "favor_interactive", favor_lanes=interactive, favor_after=favor_after
        ),
        "drop_optional_features": Rung(
            "drop_optional_features", DropOptionalFeatures(reasoning_effort)
        ),
        "cap_max_new_tokens": Rung(
            "cap_max_new_tokens", CapMaxNewTokens(max_new_tokens), lanes=interactive
        ),
        "compress_prompt": Rung(
            "compress_prompt",
            None if compress is None else CompressPrompt(compress),
            lanes=compress_scope,
            marker=compress is None,
        ),
        "cheaper_model": Rung(
            "cheaper_model",
            None if cheaper_model is None else UseModel(cheaper_model),
            lanes=_lanes("downgrade_lanes", downgrade_lanes),
        ),
        "pause_background": Rung(
            "pause_background", pause_lanes=_lanes("pause_lanes", pause_lanes)
        ),
        "shed": Rung("shed", shed=True, keep_lanes=interactive, retry_after=shed_retry_after),
    }
    if isinstance(order, str) or len(set(order)) != len(order):
        raise UsageError("order: expected distinct rung names")
    unknown = [name for name in order if name not in built]
    if unknown:
        raise UsageError(f"order: unknown rungs {unknown}; expected names from {BUILTIN_RUNGS}")
    return tuple(built[name] for name in order)
