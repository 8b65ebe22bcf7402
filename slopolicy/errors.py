"""The exceptions slopolicy raises.

Expected outcomes (a request refused by a quota, deferred by the router) are
returned as decision values, never raised; exceptions signal misuse or bad
input. Every exception derives from one root::

    SlopolicyError
    ├── ConfigError          an invalid policy configuration (ValueError)
    ├── InvalidRequest       a malformed request (ValueError)
    ├── UsageError           an API called against its contract (ValueError)
    ├── RoutingError         a custom routing rule broke its contract (TypeError)
    └── SimulationError      a bad scenario file, trace or simulation argument (ValueError)

Each carries structured fields so callers never parse messages.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = (
    "ConfigError",
    "FieldError",
    "InvalidRequest",
    "RoutingError",
    "SimulationError",
    "SlopolicyError",
    "UsageError",
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
