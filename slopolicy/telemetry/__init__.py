"""OpenTelemetry metrics and traces for every decision and every request.

::

    from opentelemetry.sdk.metrics import MeterProvider
    from slopolicy.telemetry import Telemetry, TopLabels

    telemetry = Telemetry(
        meter_provider=MeterProvider(...),     # default: the global providers
        tenants=TopLabels(["acme"], top=20),   # bounded tenant attribute values
        attributes={"gen_ai.provider.name": "vllm", "server.address": "10.0.0.7"},
    )
    async with Gate(config, telemetry=telemetry) as gate: ...

A gate records through the process-wide :func:`default_telemetry` unless told
otherwise (``telemetry=False`` records nothing). Only ``opentelemetry-api`` is
imported: with no SDK installed every instrument is a no-op proxy that starts
forwarding once the host sets a provider, and slopolicy never sets one.
The instruments and attributes are listed in ``docs/telemetry.md``.
"""

from __future__ import annotations

from slopolicy.telemetry.config import Telemetry as Telemetry
from slopolicy.telemetry.config import default_telemetry as default_telemetry
from slopolicy.telemetry.labels import FirstSeenLabels as FirstSeenLabels
from slopolicy.telemetry.labels import LabelStatistics as LabelStatistics
from slopolicy.telemetry.labels import TopLabels as TopLabels
from slopolicy.telemetry.recorder import Recorder as Recorder

__all__ = (
    "FirstSeenLabels",
    "LabelStatistics",
    "Recorder",
    "Telemetry",
    "TopLabels",
    "default_telemetry",
)
