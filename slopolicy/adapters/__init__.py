"""Adapters: put a :class:`~slopolicy.Gate` in front of the engine client you already have.

Each module wraps one engine family and needs its own optional extra; none is
imported by :mod:`slopolicy` itself, and importing one without its extra
raises an :class:`ImportError` that names the ``pip install`` to run.

- :mod:`slopolicy.adapters.openai`: ``openai.AsyncOpenAI`` pointed at ``vllm
  serve``, SGLang, TGI's Messages API, llama.cpp's ``llama-server`` or any
  OpenAI-compatible server (extra ``slopolicy[openai]``);
- :mod:`slopolicy.adapters.vllm`: vLLM's in-process ``AsyncLLM`` /
  ``AsyncLLMEngine``, duck-typed, importing nothing from vLLM (``slopolicy[vllm]``);
- :mod:`slopolicy.adapters.tgi`: ``huggingface_hub.AsyncInferenceClient``
  against Text Generation Inference (``slopolicy[tgi]``);
- :mod:`slopolicy.adapters.metrics`: an engine's Prometheus ``/metrics``, polled
  into :class:`~slopolicy.EngineSignals` (``slopolicy[prometheus]``);
- :mod:`slopolicy.adapters.llamacpp`: llama-server's ``/metrics`` and ``/slots``
  (``slopolicy[prometheus]``).

What they share lives in :mod:`slopolicy.adapters.common`: :class:`EngineError`
(how an engine's refusal or failure maps to the gate's outcomes and to an HTTP
status) and :class:`Reply` (a whole answer with the policy's record); and in
:mod:`slopolicy.adapters.calls`: :class:`GatedStream` (an engine stream that
owns its ticket) and the helpers a new adapter builds on. ``EngineError``
derives from :class:`~slopolicy.SlopolicyError`, beside ``Rejected``.
"""

from __future__ import annotations

from slopolicy.adapters.calls import GatedStream as GatedStream
from slopolicy.adapters.common import EngineError as EngineError
from slopolicy.adapters.common import EngineFault as EngineFault
from slopolicy.adapters.common import Reply as Reply
from slopolicy.adapters.common import engine_error_response as engine_error_response

__all__ = ("EngineError", "EngineFault", "GatedStream", "Reply", "engine_error_response")
