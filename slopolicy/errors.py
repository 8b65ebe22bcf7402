"""The exceptions slopolicy raises.

The sans-IO core returns expected outcomes (a request refused by a quota,
deferred by the router) as decision values, never raises them; its exceptions
signal misuse or bad input. The async gate, whose callers wait inside
``async with``, raises its refusals as :class:`Rejected`. Every exception
derives from one root::

    SlopolicyError
    ├── ConfigError          an invalid policy configuration (ValueError)
    ├── InvalidRequest       a malformed request (ValueError)
    ├── UsageError           an API called against its contract (ValueError)
    ├── RoutingError         a custom routing rule broke its contract (TypeError)
    ├── SimulationError      a bad scenario file, trace or simulation argument (ValueError)
    │   └── TraceError       a trace file that cannot be replayed: file, line, column
    ├── Rejected             the gate refused a request: quota, overload, full queue, rule
    │   ├── Expired          accepted, but its deadline passed while it waited in the queue
    │   ├── GateClosed       the gate closed before the request could start
    │   ├── Revoked          started, then ended to give its KV to a tenant within its share
    │   └── ToolTimeout      a tool call ran past its timeout (``gate.tool``)
    └── WouldBlock           admit_nowait: accepted, but it could not start at once

Each carries structured fields so callers never parse messages. ``WouldBlock``
is slopolicy's own, not ``anyio.WouldBlock``: this module is imported by the
core, which must not import anyio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slopolicy.core.decisions import Admit, Decision, Demote
    from slopolicy.core.outcome import Finished
    from slopolicy.core.reasons import Reason

__all__ = (
    "ConfigError",
    "Expired",
    "FieldError",
    "GateClosed",
    "InvalidRequest",
    "Rejected",
    "Revoked",
    "RoutingError",
    "SimulationError",
    "SlopolicyError",
    "ToolTimeout",
    "TraceError",
    "UsageError",
    "WouldBlock",
)


class SlopolicyError(Exception):
    """Root of every exception raised by slopolicy."""


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem in a configuration: where (a dotted path) and why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message}"


class ConfigError(SlopolicyError, ValueError):
    """A policy configuration failed validation.

    ``errors`` lists every bad field with its dotted path (``lanes.0.weight``)
    and the reason, so a CLI or UI can point at each one.
    """

    def __init__(self, errors: tuple[FieldError, ...], source: str | None = None) -> None:
        self.errors = errors
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  {error}" for error in errors)
        super().__init__(f"invalid policy configuration{where}:\n{lines}")


class InvalidRequest(SlopolicyError, ValueError):
    """A request field has the wrong type or an impossible value.

    ``field`` names the offending field (``messages[2].content`` for nested
    values). Gateways should answer HTTP 400.
    """

    http_status = 400

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class UsageError(SlopolicyError, ValueError):
    """A method was called against its contract: a negative cost, an unknown
    request id, settings that cannot work. A bug in the caller, not bad input."""


class RoutingError(SlopolicyError, TypeError):
    """A custom routing rule returned something other than a verdict or ``None``."""


class SimulationError(SlopolicyError, ValueError):
    """A scenario file, trace or simulation argument is invalid.

    ``source`` names the file (or option), ``line`` the 1-based line of a
    trace, and ``errors`` every bad field of a scenario file with its dotted
    path, so a CLI can point at each one.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        errors: tuple[FieldError, ...] = (),
    ) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.errors = errors
        where = source or ""
        if line is not None:
            where = f"{where}:{line}" if where else f"line {line}"
        text = f"{where}: {message}" if where else message
        if errors:
            text += "\n" + "\n".join(f"  {error}" for error in errors)
        super().__init__(text)


class TraceError(SimulationError):
    """A trace file (or one of its rows) cannot be replayed.

    ``source`` is the file, ``line`` the 1-based line where the bad row ends
    (``None`` for a problem with the whole file) and ``column`` the field, or
    ``None`` when the row as a whole is bad (not UTF-8, not JSON, too long).
    """

    def __init__(
        self, message: str, *, source: str, line: int | None = None, column: str | None = None
    ) -> None:
        self.column = column
        text = message if column is None else f"column {column!r}: {message}"
        super().__init__(text, source=source, line=line)


class Rejected(SlopolicyError):
    """The gate refused a request; nothing of it is left queued or held.

    Attributes:
        reason: the machine-readable :class:`~slopolicy.Reason`
            (``reason.code`` is its wire name).
        message: a sentence for people.
        retry_after: seconds after which the same request may succeed, or
            ``None`` when that cannot be known.
        http_status: what a gateway should answer (429 for the tenant's own
            quota, 503 for overload, a full queue or expiry, 4xx for requests
            that can never pass).
        decision: the policy's decision: the ``Defer``/``Reject`` that refused
            it, the ``Admit``/``Demote`` it was queued with (for
            :class:`Expired` and :class:`GateClosed`), or ``None``.
    """

    def __init__(
        self,
        reason: Reason,
        message: str,
        *,
        http_status: int,
        retry_after: float | None = None,
        decision: Decision | None = None,
    ) -> None:
        self.reason = reason
        self.message = message
        self.http_status = http_status
        self.retry_after = retry_after
        self.decision = decision
        super().__init__(message)

    @classmethod
    def of(cls, decision: Decision) -> Rejected:
        """The exception for a refusing ``Defer`` or ``Reject`` decision."""
        return cls(
            decision.reason,
            decision.message,
            http_status=decision.http_status,
            retry_after=decision.retry_after,
            decision=decision,
        )

    @property
    def code(self) -> str:
        """The reason's stable wire name, e.g. ``"rate_limited"``."""
        return str(self.reason.value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reason.value!r}, {self.message!r})"


class Expired(Rejected):
    """Accepted and queued, but its deadline (the request's own, or the lane's
    longest queue wait) passed before it could start. ``finished`` is the
    policy's record (outcome ``expired``, with the seconds it waited)."""

    def __init__(self, message: str, finished: Finished, decision: Decision | None) -> None:
        from slopolicy.core.reasons import Reason

        super().__init__(Reason.EXPIRED, message, http_status=503, decision=decision)
        self.finished = finished


class Revoked(Rejected):
    """Started, then ended by the policy (outcome ``revoked``; why:
    ``finished.revoked_for``): its tenant was over its share of a saturated
    engine, and its KV let a queued request of a tenant within its share
    start (``engine.reclaim``), or it had no first token by its lane's p99
    TTFT target while the engine was preempting for want of KV. HTTP 503: the
    client may send it again, and it is served when the engine has room.
    ``finished`` is the policy's record."""

    def __init__(self, finished: Finished, decision: Decision | None) -> None:
        from slopolicy.core.outcome import Revocation
        from slopolicy.core.reasons import Reason

        if finished.revoked_for is Revocation.STALLED:
            why = (
                f"it had no first token by the p99 TTFT target of lane {finished.lane!r}, "
                "while the engine was preempting for want of KV"
            )
        else:
            why = (
                f"tenant {finished.tenant!r} is over its share of the saturated engine, and "
                "its KV went to a request of a tenant within its share"
            )
        message = (
            f"request {finished.id!r} was stopped {finished.e2e:.3g} s after it arrived: "
            f"{why}; retry later"
        )
        super().__init__(Reason.REVOKED, message, http_status=503, decision=decision)
        self.finished = finished


class GateClosed(Rejected):
    """The gate is closed, or closed while the request waited (HTTP 503)."""

    def __init__(
        self, message: str = "the gate is closed", decision: Decision | None = None
    ) -> None:
        from slopolicy.core.reasons import Reason

        super().__init__(Reason.GATE_CLOSED, message, http_status=503, decision=decision)


class ToolTimeout(Rejected):
    """A tool call (``gate.tool``) ran past its timeout and was cancelled; its
    slot is back, and the call counts as timed out (HTTP 504).

    Attributes:
        tenant: whose call it was.
        tool: the tool's name.
        timeout: the seconds it was allowed.
    """

    def __init__(self, tenant: str, tool: str, timeout: float) -> None:
        from slopolicy.core.reasons import Reason

        message = f"tool {tool!r} of tenant {tenant!r} ran past its timeout of {timeout:.3g} s"
        super().__init__(Reason.TOOL_TIMEOUT, message, http_status=504)
        self.tenant = tenant
        self.tool = tool
        self.timeout = timeout


class WouldBlock(SlopolicyError):
    """``admit_nowait``: the request was accepted but could not start at once.

    Nothing is left queued or held; the policy counts the attempt as
    ``cancelled``. ``decision`` is the ``Admit``/``Demote`` it was accepted with.
    """

    def __init__(self, decision: Admit | Demote) -> None:
        self.decision = decision
        super().__init__(f"request {decision.request.id!r} cannot start at once")
