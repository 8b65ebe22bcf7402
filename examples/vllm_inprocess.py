"""Put a slopolicy Gate in front of vLLM's in-process engine (``AsyncLLM``).

Run it on a machine with vLLM (``pip install vllm``)::

    python -m examples.vllm_inprocess Qwen/Qwen2.5-0.5B-Instruct "Hello"

The adapter is duck-typed: :func:`answer` takes any engine with vLLM's
``generate``/``abort``, so the tests drive it with
:class:`~slopolicy.testing.fake_vllm.FakeAsyncLLM`. The gate caps
``max_tokens`` and ``n`` on a copy of the sampling params, passes vLLM's
``priority`` for the lane, counts tokens from the ``RequestOutput`` stream, and
aborts the request in vLLM if the reader stops early.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from slopolicy import Gate, PolicyConfig
from slopolicy.adapters.vllm import AsyncEngine, GatedAsyncLLM

__all__ = ("answer", "main")

#: vLLM priority per lane (lower runs first; needs ``scheduling_policy="priority"``).
PRIORITIES = {"interactive": 0, "heavy": 5, "background": 10}


# --8<-- [start:answer]
async def answer(
    engine: AsyncEngine, gate: Gate, prompt: str, sampling_params: Any, *, tenant: str = "demo"
) -> str:
    """One answer through the gate: the text of the first sequence."""
    gated = GatedAsyncLLM(engine, gate, priorities=PRIORITIES)
    stream = await gated.generate(prompt, sampling_params, tenant=tenant)
    text = ""
    async with stream:
        async for output in stream:
            text = output.outputs[0].text  # CUMULATIVE: the whole text so far
    return text


# --8<-- [end:answer]


async def _main(model: str, prompt: str) -> None:  # pragma: no cover - needs vLLM and a GPU
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(model=model, scheduling_policy="priority"))
    try:
        async with Gate(PolicyConfig()) as gate:
            print(await answer(engine, gate, prompt, SamplingParams(max_tokens=128)))
    finally:
        engine.shutdown()


def main() -> None:  # pragma: no cover - needs vLLM and a GPU
    """The command line: ``MODEL [PROMPT...]``."""
    anyio.run(_main, sys.argv[1], " ".join(sys.argv[2:]) or "Hello")


if __name__ == "__main__":
    main()
