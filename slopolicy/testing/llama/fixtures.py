"""pytest fixtures for a real ``llama-server``: load them in your ``conftest.py``::

    pytest_plugins = ["slopolicy.testing.llama.fixtures"]

    async def test_my_policy(llama_server):           # 4 slots, 16k tokens of KV
        client = AsyncOpenAI(base_url=f"{llama_server.url}/v1", api_key="-")
        ...

    @pytest.fixture(scope="module")
    def big_server(llama_server_factory):             # your own shape, one per module
        with llama_server_factory(slots=8, context=65_536) as server:
            yield server

Without a built server (``python -m slopolicy.testing.llama build``) or the
``gguf`` package, these fixtures skip the test and say why; with
``SLOPOLICY_REQUIRE_LLAMA=1`` (CI) they fail it instead.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from slopolicy.testing.llama.build import Installation, find_llama_server
from slopolicy.testing.llama.model import TinyLlama, tiny_model
from slopolicy.testing.llama.server import LlamaServer

__all__ = (
    "REQUIRE_VARIABLE",
    "llama_installation",
    "llama_model",
    "llama_server",
    "llama_server_factory",
    "missing",
)

#: Set (to anything but empty) to fail instead of skip when llama-server is missing.
REQUIRE_VARIABLE = "SLOPOLICY_REQUIRE_LLAMA"


def missing(reason: str) -> NoReturn:
    """Skip the test, or fail it where llama-server is required."""
    if os.environ.get(REQUIRE_VARIABLE):
        message = f"{reason} ({REQUIRE_VARIABLE} is set: llama-server must be available)"
        pytest.fail(message, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def llama_installation() -> Installation:
    """The cached build of ``llama-server`` (see :func:`find_llama_server`)."""
    found = find_llama_server()
    if found is None:
        missing(
            "llama-server is not built: run `python -m slopolicy.testing.llama build` "
            "(about 15 CPU-minutes, cached after)"
        )
    return found


@pytest.fixture(scope="session")
def llama_model(llama_installation: Installation) -> Path:
    """The tiny random-weight model (:class:`TinyLlama` defaults), cached beside the build."""
    if importlib.util.find_spec("gguf") is None:
        missing("the tiny model needs the gguf package: pip install 'slopolicy[llama]'")
    return tiny_model(llama_installation.vocab, TinyLlama())


@pytest.fixture(scope="session")
def llama_server_factory(
    llama_installation: Installation, llama_model: Path
) -> Iterator[Callable[..., LlamaServer]]:
    """``factory(slots=..., context=..., **options)``: a started
    :class:`LlamaServer` on the tiny model; every one still running is closed
    at the end of the session (close it yourself to stop it sooner)."""
    servers: list[LlamaServer] = []

    def factory(**options: Any) -> LlamaServer:
        server = LlamaServer(llama_installation, llama_model, **options)
        servers.append(server)
        return server.start()

    yield factory
    for server in servers:
        server.close()


@pytest.fixture(scope="session")
def llama_server(llama_server_factory: Callable[..., LlamaServer]) -> LlamaServer:
    """One server for the session: 4 slots sharing 16,384 tokens of KV."""
    return llama_server_factory(slots=4, context=16_384)
