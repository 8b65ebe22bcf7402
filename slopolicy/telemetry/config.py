"""The host's side: :class:`Telemetry`, what a gate records through."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping

from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.metrics import _internal as _metrics_api
from opentelemetry.trace import TracerProvider
from opentelemetry.util.types import AttributeValue

from slopolicy._version import __version__
from slopolicy.core.policy import Policy
from slopolicy.errors import UsageError
from slopolicy.telemetry.attributes import AttributeSets
from slopolicy.telemetry.instruments import SCOPE, instruments_for
from slopolicy.telemetry.labels import FirstSeenLabels, TopLabels
from slopolicy.telemetry.recorder import Recorder

__all__ = ("Telemetry", "default_telemetry", "recorder_for")


class Telemetry:
    """OpenTelemetry metrics and traces for gates: ``Gate(config, telemetry=Telemetry(...))``.

    Args:
        meter_provider: where the instruments live; ``None`` is the global
            provider (the API's no-op proxy until the host sets one).
        tracer_provider: where request spans go; ``None`` is the global one.
        tenants: how tenants become attribute values: a :class:`TopLabels`,
            or a collection of names (an allow-list; nobody else is named).
            The default names the top 10 by traffic.
        models: how ``gen_ai.request.model`` values are bounded: a
            :class:`FirstSeenLabels`, or a collection of names (an
            allow-list). The default names the first 16 models seen.
        attributes: constant attributes for every measurement and span, such
            as ``gen_ai.provider.name`` and ``server.address``. Gates that
            share a meter provider need distinct ones, or their gauges
            report into one series.
        operation: ``gen_ai.operation.name`` for every request; by default
            ``chat`` for requests with messages, else ``text_completion``.
        refresh_every: seconds between a gate's readings of its policy for
            gauge readers that collect from another thread (see
            :class:`~slopolicy.telemetry.Recorder`).

    One ``Telemetry`` may serve several gates, on one event loop or several
    threads; every gate on the same meter provider shares its instruments.
    """

    __slots__ = (
        "_listening",
        "attributes",
        "instruments",
        "models",
        "operation",
        "refresh_every",
        "sets",
        "tenants",
        "tracer",
    )

    def __init__(
        self,
        *,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
        tenants: TopLabels | Iterable[str] | None = None,
        models: FirstSeenLabels | Iterable[str] | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        operation: str | None = None,
        refresh_every: float = 5.0,
    ) -> None:
        if isinstance(refresh_every, bool) or not (
            isinstance(refresh_every, (int, float)) and 0 < refresh_every < math.inf
        ):
            raise UsageError(
                f"refresh_every must be a positive number of seconds, got {refresh_every!r}"
            )
        if tenants is None:
            tenants = TopLabels()
        elif not isinstance(tenants, TopLabels):
            tenants = TopLabels(tenants, top=0)
        if models is None:
            models = FirstSeenLabels()
        elif not isinstance(models, FirstSeenLabels):
            models = FirstSeenLabels(models, limit=0)
        self.tenants: TopLabels = tenants
        self.models: FirstSeenLabels = models
        self.attributes: Mapping[str, AttributeValue] = dict(attributes or {})
        self.operation = operation
        self.refresh_every = float(refresh_every)
        self.sets = AttributeSets(self.attributes)
        self.instruments = instruments_for(meter_provider, __version__)
        provider = trace.get_tracer_provider() if tracer_provider is None else tracer_provider
        # The global provider is the API's proxy until the host sets one, and
        # its tracers forward from then on.
        self.tracer = provider.get_tracer(SCOPE, __version__)
        self._listening = meter_provider is not None or tracer_provider is not None

    def listening(self) -> bool:
        """Whether anything can receive a measurement or a span: a provider
        was given, or the host has set a global one. Until then the API's
        proxies drop everything, so the recorder skips its work (a request
        submitted before that is not recorded at all)."""
        if not self._listening and _global_provider_set():
            self._listening = True  # a global provider is set once, never unset
        return self._listening

    def bind(self, policy: Policy) -> Recorder:
        """The recorder for one gate's ``policy`` (the gate calls this)."""
        return Recorder(self, policy)

    def __repr__(self) -> str:
        return (
            f"Telemetry(tenants={self.tenants!r}, models={self.models!r}, "
            f"attributes={dict(self.attributes)!r})"
        )


def _global_provider_set() -> bool:
    # The module state the API's own proxies check before forwarding (cheap,
    # unlike get_meter_provider(), which looks up an environment variable on
    # every call while unset). Should the API ever rename it, getattr's
    # default says "set" and recording simply goes on into the proxies.
    meters = getattr(_metrics_api, "_METER_PROVIDER", True)
    tracers = getattr(trace, "_TRACER_PROVIDER", True)
    return meters is not None or tracers is not None


_DEFAULT: list[Telemetry] = []
_DEFAULT_LOCK = threading.Lock()


def default_telemetry() -> Telemetry:
    """The process-wide :class:`Telemetry` on the global providers, made on
    first use: what ``Gate(..., telemetry=True)`` (the default) records through."""
    with _DEFAULT_LOCK:
        if not _DEFAULT:
            _DEFAULT.append(Telemetry())
        return _DEFAULT[0]


def recorder_for(telemetry: Telemetry | bool, policy: Policy) -> Recorder | None:
    """The recorder a gate uses: ``True`` is :func:`default_telemetry`, ``False`` none."""
    if isinstance(telemetry, Telemetry):
        return telemetry.bind(policy)
    return default_telemetry().bind(policy) if telemetry else None
