"""The SDK side of the telemetry tests: in-memory reader and exporter, and
the collected points flattened for assertions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.metrics import (
    Counter,
    Meter,
    NoOpCounter,
    NoOpHistogram,
    NoOpMeter,
    NoOpMeterProvider,
    NoOpUpDownCounter,
    UpDownCounter,
)
from opentelemetry.metrics import Histogram as ApiHistogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
    Sum,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from slopolicy.telemetry import Telemetry

Attributes = frozenset[tuple[str, Any]]


@dataclass(frozen=True)
class Metric:
    """One instrument's collected data: its kind, unit and points by attribute set."""

    name: str
    unit: str
    kind: str  # "histogram", "sum" (monotonic or not) or "gauge"
    monotonic: bool | None
    points: Mapping[Attributes, HistogramDataPoint | NumberDataPoint]

    def point(self, **attributes: Any) -> HistogramDataPoint | NumberDataPoint:
        """The one point whose attributes include ``attributes`` (keys with
        ``__`` for dots)."""
        wanted = {key.replace("__", "."): value for key, value in attributes.items()}
        found = [
            point
            for attrs, point in self.points.items()
            if all(dict(attrs).get(key) == value for key, value in wanted.items())
        ]
        assert len(found) == 1, (self.name, wanted, list(self.points))
        return found[0]

    def histogram(self, **attributes: Any) -> HistogramDataPoint:
        point = self.point(**attributes)
        assert isinstance(point, HistogramDataPoint)
        return point

    def value(self, **attributes: Any) -> float:
        point = self.point(**attributes)
        assert isinstance(point, NumberDataPoint)
        return point.value

    def total(self) -> float:
        """Sum of values (sums, gauges) or counts (histograms) over every point."""
        return sum(
            point.count if isinstance(point, HistogramDataPoint) else point.value
            for point in self.points.values()
        )

    def attribute_sets(self) -> set[Attributes]:
        return set(self.points)


class Otel:
    """Providers wired to in-memory sinks."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False)
        self.exporter = InMemorySpanExporter()
        self.tracers = TracerProvider(shutdown_on_exit=False)
        self.tracers.add_span_processor(SimpleSpanProcessor(self.exporter))

    def telemetry(self, **options: Any) -> Telemetry:
        return Telemetry(meter_provider=self.meters, tracer_provider=self.tracers, **options)

    def metrics(self) -> dict[str, Metric]:
        """Collect now (in the caller's thread) and flatten by instrument name."""
        data = self.reader.get_metrics_data()
        found: dict[str, Metric] = {}
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    body = metric.data
                    points = {frozenset(p.attributes.items()): p for p in body.data_points}  # type: ignore[union-attr]
                    if isinstance(body, Histogram):
                        kind, monotonic = "histogram", None
                    elif isinstance(body, Sum):
                        kind, monotonic = "sum", body.is_monotonic
                    else:
                        assert isinstance(body, Gauge)
                        kind, monotonic = "gauge", None
                    found[metric.name] = Metric(metric.name, metric.unit, kind, monotonic, points)  # type: ignore[arg-type]
        return found

    def spans(self) -> Sequence[ReadableSpan]:
        return self.exporter.get_finished_spans()

    def shutdown(self) -> None:
        self.meters.shutdown()
        self.tracers.shutdown()


class _Counting(NoOpCounter, NoOpUpDownCounter, NoOpHistogram):
    """A synchronous instrument that keeps only the attribute sets it saw."""

    def __init__(self, name: str, seen: dict[str, set[Attributes]]) -> None:
        super().__init__(name)
        self._seen = seen.setdefault(name, set())

    def add(self, amount: float, attributes: Any = None, context: Any = None) -> None:
        self._seen.add(frozenset((attributes or {}).items()))

    record = add


class _CountingMeter(NoOpMeter):
    def __init__(self, seen: dict[str, set[Attributes]]) -> None:
        super().__init__("counting")
        self._seen_by_name = seen

    def create_counter(self, name: str, unit: str = "", description: str = "") -> Counter:
        return _Counting(name, self._seen_by_name)

    def create_up_down_counter(
        self, name: str, unit: str = "", description: str = ""
    ) -> UpDownCounter:
        return _Counting(name, self._seen_by_name)

    def create_histogram(
        self,
        name: str,
        unit: str = "",
        description: str = "",
        *,
        explicit_bucket_boundaries_advisory: Sequence[float] | None = None,
    ) -> ApiHistogram:
        return _Counting(name, self._seen_by_name)


class AttributeSetCounter(NoOpMeterProvider):
    """A meter provider (the API's interface, injected like any other) whose
    synchronous instruments only collect the distinct attribute sets they are
    given: a cheap way to count series over a very long run."""

    def __init__(self) -> None:
        self.seen: dict[str, set[Attributes]] = {}

    def get_meter(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> Meter:
        return _CountingMeter(self.seen)
