"""Which schedulers a comparison runs: ours and the baselines by name, or your own.

A policy is given as

- a built-in name: ``slopolicy`` (ours) or one of
  :data:`~slopolicy.sim.baselines.BASELINES`;
- an import path ``package.module:Name`` (``Name`` may be dotted), naming
  one of the next two;
- a scheduler object (anything with the
  :class:`~slopolicy.sim.interface.Scheduler` methods, a ``name`` and a
  ``scheduling``): :func:`~slopolicy.sim.comparison.compare` runs it as is, a
  sweep runs a fresh deep copy at each rate scale;
- a class or a function taking no arguments that returns one, called for a
  fresh scheduler for every run.

Names must be unique among the policies of one comparison.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import cast

from slopolicy.config import PolicyConfig
from slopolicy.errors import UsageError
from slopolicy.sim.baselines import (
    BASELINES,
    FCFS,
    RPM,
    VTC,
    DynamoRouter,
    LanePriority,
    LlmdFlowControl,
    VLLMQueueLimits,
)
from slopolicy.sim.interface import Scheduler
from slopolicy.sim.ours import DEFAULT_SIGNALS, PolicyScheduler

__all__ = (
    "OURS",
    "POLICIES",
    "PolicyFactory",
    "PolicySpec",
    "make_scheduler",
    "resolve",
    "resolve_all",
)

#: Our policy's name in reports.
OURS = "slopolicy"
#: Every built-in policy, ours first.
POLICIES = (OURS, *BASELINES)

#: What names a policy: a built-in name or import path, a scheduler, or a factory of one.
PolicySpec = str | Scheduler | Callable[[], Scheduler]

_METHODS = ("submit", "dispatch", "first_token", "tokens", "finish", "wakeup", "observe")


@dataclass(frozen=True, slots=True)
class _Settings:
    config: PolicyConfig
    rpm_limit: int
    signals: Collection[str]
    engine_priority: bool


_BUILTIN: dict[str, Callable[[_Settings], Scheduler]] = {
    OURS: lambda s: PolicyScheduler(s.config, signals=s.signals, engine_priority=s.engine_priority),
    "fcfs": lambda s: FCFS(),
    "priority": lambda s: LanePriority(s.config),
    "vtc": lambda s: VTC(),
    "rpm": lambda s: RPM(s.rpm_limit),
    "llm-d": lambda s: LlmdFlowControl(s.config),
    "llm-d-slo": lambda s: LlmdFlowControl(s.config, ttl="ttft", name="llm-d-slo"),
    "dynamo": lambda s: DynamoRouter(s.config),
    "vllm-queue": lambda s: VLLMQueueLimits(),
}
assert tuple(_BUILTIN) == POLICIES


def make_scheduler(
    name: str,
    config: PolicyConfig,
    *,
    rpm_limit: int = 60,
    signals: Collection[str] = DEFAULT_SIGNALS,
    engine_priority: bool = True,
) -> Scheduler:
    """A fresh built-in scheduler called ``name`` (one of :data:`POLICIES`);
    ours is ``Policy(config)`` (``signals`` and ``engine_priority`` as in
    :class:`PolicyScheduler`), and the lane-aware baselines use ``config``'s lanes."""
    if not isinstance(name, str) or name not in _BUILTIN:
        raise UsageError(f"unknown policy {name!r}; policies are {', '.join(POLICIES)}")
    return _builtin(name, _Settings(config, rpm_limit, signals, engine_priority)).make()


def _builtin(name: str, settings: _Settings) -> PolicyFactory:
    return PolicyFactory(name, lambda: _BUILTIN[name](settings))


@dataclass(frozen=True, slots=True)
class PolicyFactory:
    """One policy of a comparison: its ``name`` in reports, and ``make``,
    which returns a fresh scheduler for each run. ``given`` is the object
    the caller passed, when it was a scheduler (a single run uses it as is)."""

    name: str
    make: Callable[[], Scheduler]
    given: Scheduler | None = None

    def first(self) -> Scheduler:
        """The scheduler for a single run: the one given, else a fresh one."""
        return self.given if self.given is not None else self.make()


def resolve(
    spec: PolicySpec,
    config: PolicyConfig,
    *,
    rpm_limit: int = 60,
    signals: Collection[str] = DEFAULT_SIGNALS,
    engine_priority: bool = True,
) -> PolicyFactory:
    """The :class:`PolicyFactory` for ``spec`` (see the module docstring);
    the keyword arguments configure the built-ins, as :func:`make_scheduler`.
    Raises :class:`~slopolicy.errors.UsageError` for an unknown name, an
    import path that does not import, or an object that is not a scheduler."""
    if isinstance(spec, str):
        if spec in _BUILTIN:
            return _builtin(spec, _Settings(config, rpm_limit, signals, engine_priority))
        if ":" not in spec:
            known = ", ".join(POLICIES)
            raise UsageError(
                f"unknown policy {spec!r}; policies are {known}, or an import path module:Name"
            )
        return _from_object(_import(spec), spec)
    return _from_object(spec, repr(spec))


def _import(path: str) -> object:
    module_name, _, attribute = path.partition(":")
    try:
        found: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as error:
        raise UsageError(f"cannot import the policy {path!r}: {error}") from error
    return found


def _from_object(found: object, where: str) -> PolicyFactory:
    if _is_scheduler(found) and not isinstance(found, type):
        given = _checked(found, where)
        return PolicyFactory(given.name, lambda: copy.deepcopy(given), given)
    if callable(found):
        factory: Callable[[], object] = found

        def make() -> Scheduler:
            try:
                made = factory()
            except TypeError as error:
                raise UsageError(f"{where} must take no arguments: {error}") from error
            return _checked(made, f"what {where} returned")

        return PolicyFactory(make().name, make)
    raise UsageError(f"{where} is neither a scheduler nor a class or function making one")


def _is_scheduler(found: object) -> bool:
    return all(callable(getattr(found, method, None)) for method in _METHODS)


def _checked(found: object, where: str) -> Scheduler:
    if not _is_scheduler(found):
        missing = [m for m in _METHODS if not callable(getattr(found, m, None))]
        raise UsageError(f"{where} is not a scheduler: it lacks {', '.join(missing)}")
    name = getattr(found, "name", None)
    if not isinstance(name, str) or not name:
        raise UsageError(f"{where} needs a non-empty str name")
    if getattr(found, "scheduling", None) not in ("fcfs", "priority"):
        raise UsageError(f"{where}.scheduling must be 'fcfs' or 'priority'")
    return cast(Scheduler, found)


def resolve_all(
    specs: Sequence[PolicySpec],
    config: PolicyConfig,
    *,
    rpm_limit: int = 60,
    signals: Collection[str] = DEFAULT_SIGNALS,
    engine_priority: bool = True,
) -> tuple[PolicyFactory, ...]:
    """:func:`resolve` each of ``specs``: at least one, their names unique."""
    if isinstance(specs, str) or not specs:
        raise UsageError("give at least one policy, as a sequence")
    factories = tuple(
        resolve(spec, config, rpm_limit=rpm_limit, signals=signals, engine_priority=engine_priority)
        for spec in specs
    )
    names = [f.name for f in factories]
    if len(set(names)) != len(names):
        raise UsageError(f"policy names must be unique, got {names}")
    return factories
