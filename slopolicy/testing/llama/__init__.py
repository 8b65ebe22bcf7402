"""A real engine for tests: llama.cpp's ``llama-server``, built from PyPI, on a tiny model.

- :mod:`~slopolicy.testing.llama.build`: find or build the server from the
  ``llama-cpp-python`` sdist into a user cache (``python -m
  slopolicy.testing.llama build``);
- :mod:`~slopolicy.testing.llama.model`: a tiny random-weight Llama in GGUF
  with Llama 3's real tokenizer (needs ``slopolicy[llama]``: the ``gguf`` package);
- :mod:`~slopolicy.testing.llama.server`: :class:`LlamaServer`, one process
  on a free loopback port;
- :mod:`~slopolicy.testing.llama.fixtures`: pytest fixtures
  (``pytest_plugins = ["slopolicy.testing.llama.fixtures"]``).

Nothing here imports pytest or gguf until used.
"""

from __future__ import annotations

from slopolicy.testing.llama.build import DEFAULT_VERSION as DEFAULT_VERSION
from slopolicy.testing.llama.build import BuildError as BuildError
from slopolicy.testing.llama.build import Installation as Installation
from slopolicy.testing.llama.build import build_llama_server as build_llama_server
from slopolicy.testing.llama.build import find_llama_server as find_llama_server
from slopolicy.testing.llama.model import TinyLlama as TinyLlama
from slopolicy.testing.llama.model import tiny_model as tiny_model
from slopolicy.testing.llama.server import LlamaServer as LlamaServer

__all__ = (
    "DEFAULT_VERSION",
    "BuildError",
    "Installation",
    "LlamaServer",
    "TinyLlama",
    "build_llama_server",
    "find_llama_server",
    "tiny_model",
)
