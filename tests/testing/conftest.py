from __future__ import annotations

from tests.runtime.conftest import anyio_backend as anyio_backend
