from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runtime.conftest import anyio_backend as anyio_backend
from tests.telemetry.otel import Otel


@pytest.fixture
def otel() -> Iterator[Otel]:
    """An SDK meter provider with an in-memory reader and a tracer provider
    with an in-memory exporter: never the global providers."""
    sdk = Otel()
    yield sdk
    sdk.shutdown()
