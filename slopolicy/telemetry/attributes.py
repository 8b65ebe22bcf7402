"""Attribute sets, built once and reused for every measurement.

Every attribute value is from a bounded set (see :mod:`slopolicy.telemetry.names`),
so the sets are few; building each once keeps dict construction off the
per-request path. A request looks its sets up at submit, in three groups: by
lane, by (lane, tenant) and by (operation, model, lane). The dicts are handed
to the instruments as they are and never mutated afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from opentelemetry.util.types import AttributeValue

from slopolicy.core.outcome import Hold, Outcome, held_name
from slopolicy.telemetry import names as n

__all__ = ("AttributeSets", "Attrs", "LaneSets", "ModelSets", "TenantSets")

Attrs = dict[str, AttributeValue]

#: Distinct error types kept per (operation, model, lane); later ones are ``_OTHER``.
MAX_ERROR_TYPES: Final = 64
# Every key is bounded by configuration and the label policies; this only
# guards against a bug that would grow them.
_MAX_ENTRIES: Final = 65_536

_PHASES: Final = ("schedule", "prefill", "transfer", "decode")


class LaneSets:
    """Sets keyed by lane only (lane is ``None`` for refusals made before routing)."""

    __slots__ = ("dispatched", "lane", "left", "output", "phase", "prompt")

    def __init__(self, base: Attrs, lane: str | None) -> None:
        def make(**extra: AttributeValue) -> Attrs:
            attrs = dict(base)
            if lane is not None:
                attrs[n.LANE] = lane
            attrs.update({_KEY[name]: value for name, value in extra.items()})
            return attrs

        self.lane = make()  # the lane alone (token gaps, stalls)
        self.dispatched = make(queue_result="dispatched")
        #: The queue wait of requests that left their queue without starting,
        #: by how and by what last held them at the lane's front (``None``: ``behind``).
        self.left = {
            (outcome, hold): make(queue_result=outcome.value, held_by=held_name(hold))
            for outcome in Outcome
            for hold in (None, *Hold)
        }
        self.output = {outcome: make(outcome=outcome.value) for outcome in Outcome}
        self.phase = {phase: make(phase=phase) for phase in _PHASES}
        self.prompt = {kind: make(decision=kind) for kind in ("admit", "demote", "defer", "reject")}


class TenantSets:
    """Sets keyed by (lane, tenant label)."""

    __slots__ = ("active", "outcomes")

    def __init__(self, base: Attrs, lane: str | None, tenant: str) -> None:
        attrs = dict(base)
        if lane is not None:
            attrs[n.LANE] = lane
        attrs[n.TENANT] = tenant
        self.active = attrs
        self.outcomes = {outcome: {**attrs, n.OUTCOME: outcome.value} for outcome in Outcome}


class ModelSets:
    """The GenAI sets, keyed by (operation, model label, lane)."""

    __slots__ = ("_failed", "completed", "input", "output")

    def __init__(self, base: Attrs, operation: str, model: str | None, lane: str) -> None:
        attrs = {**base, n.OPERATION: operation}
        if model is not None:
            attrs[n.REQUEST_MODEL] = model
        attrs[n.LANE] = lane
        self.completed = attrs
        self.input = {**attrs, n.TOKEN_TYPE: "input"}
        self.output = {**attrs, n.TOKEN_TYPE: "output"}
        self._failed: dict[str, Attrs] = {}

    def failed(self, error_type: str) -> Attrs:
        """The set with ``error.type`` (bounded: see :data:`MAX_ERROR_TYPES`)."""
        found = self._failed.get(error_type)
        if found is None:
            if len(self._failed) >= MAX_ERROR_TYPES:
                error_type = n.OTHER_ERROR
            found = self._failed[error_type] = {**self.completed, n.ERROR_TYPE: error_type}
        return found


_KEY: Final = {
    "queue_result": n.QUEUE_RESULT,
    "held_by": n.QUEUE_HELD_BY,
    "outcome": n.OUTCOME,
    "phase": n.PHASE,
    "decision": n.DECISION,
}


class AttributeSets:
    """Every attribute set one :class:`~slopolicy.telemetry.Telemetry` records with,
    made on first use; ``base`` (the constant attributes) is in each."""

    __slots__ = ("_admissions", "_lanes", "_models", "_others", "_tenants", "base")

    def __init__(self, base: Mapping[str, AttributeValue]) -> None:
        self.base: Attrs = dict(base)
        self._lanes: dict[str | None, LaneSets] = {}
        self._tenants: dict[tuple[str | None, str], TenantSets] = {}
        self._models: dict[tuple[str, str | None, str], ModelSets] = {}
        self._admissions: dict[tuple[str, str, str | None, str], Attrs] = {}
        self._others: dict[tuple[tuple[str, str], ...], Attrs] = {}

    def lane(self, lane: str | None) -> LaneSets:
        """The sets for ``lane`` (``None``: refused before routing)."""
        found = self._lanes.get(lane)
        if found is None:
            found = self._lanes[lane] = LaneSets(self.base, lane)
        return found

    def tenant(self, lane: str | None, tenant: str) -> TenantSets:
        """The sets for a tenant label in ``lane``."""
        key = (lane, tenant)
        found = self._tenants.get(key)
        if found is None:
            _guard(self._tenants)
            found = self._tenants[key] = TenantSets(self.base, lane, tenant)
        return found

    def model(self, operation: str, model: str | None, lane: str) -> ModelSets:
        """The GenAI sets for an operation, a model label (``None``: no model) and a lane."""
        key = (operation, model, lane)
        found = self._models.get(key)
        if found is None:
            _guard(self._models)
            found = self._models[key] = ModelSets(self.base, operation, model, lane)
        return found

    def admission(self, kind: str, reason: str, lane: str | None, tenant: str) -> Attrs:
        """The set for one admission decision: its kind, reason code, lane and tenant label."""
        key = (kind, reason, lane, tenant)
        found = self._admissions.get(key)
        if found is None:
            _guard(self._admissions)
            found = {**self.base, n.DECISION: kind, n.REASON: reason}
            if lane is not None:
                found[n.LANE] = lane
            found[n.TENANT] = tenant
            self._admissions[key] = found
        return found

    def applied(self, rung: str, lane: str) -> Attrs:
        """A rung applied to a request in ``lane``."""
        return self._other((n.RUNG, rung), (n.LANE, lane))

    def transition(self, rung: str, direction: str, cause: str) -> Attrs:
        """A ladder move."""
        return self._other((n.RUNG, rung), (n.DIRECTION, direction), (n.CAUSE, cause))

    def tool(self, tool: str, tenant: str, result: str | None = None) -> Attrs:
        """A tool call: the configured tool name, a tenant label and, for the
        call counter, how it ended or why it was refused."""
        if result is None:
            return self._other((n.TOOL, tool), (n.TENANT, tenant))
        return self._other((n.TOOL, tool), (n.TENANT, tenant), (n.TOOL_RESULT, result))

    def task(self, lane: str, tenant: str, outcome: str) -> Attrs:
        """An ended agent task: its lane, a tenant label and its outcome."""
        return self._other((n.LANE, lane), (n.TENANT, tenant), (n.TASK_OUTCOME, outcome))

    def _other(self, *pairs: tuple[str, str]) -> Attrs:
        found = self._others.get(pairs)
        if found is None:
            _guard(self._others)
            found = self._others[pairs] = {**self.base, **dict(pairs)}
        return found


def _guard(cache: dict[Any, Any]) -> None:
    if len(cache) >= _MAX_ENTRIES:
        cache.clear()
