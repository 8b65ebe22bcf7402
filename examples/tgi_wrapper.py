"""Wrap a TGI client so every call goes through a slopolicy Gate.

Run it against a TGI server (``pip install 'slopolicy[tgi,prometheus]'``)::

    python -m examples.tgi_wrapper http://127.0.0.1:8080 "Write a haiku about queues"

The client is huggingface_hub's ``AsyncInferenceClient``, unchanged; the gate
caps ``max_new_tokens`` by lane, waits for a fair turn, and settles the
tenant's charge with TGI's own ``details.generated_tokens``. TGI's
``/metrics`` feeds the gate (queue size and batch size; TGI exports no KV
usage). TGI reports overload inside the stream; it arrives here as an
:class:`~slopolicy.adapters.EngineError`.
"""

from __future__ import annotations

import sys

import anyio
from huggingface_hub import AsyncInferenceClient

from slopolicy import Gate, PolicyConfig, Rejected
from slopolicy.adapters import EngineError
from slopolicy.adapters.metrics import MetricsScraper
from slopolicy.adapters.tgi import GatedInferenceClient

__all__ = ("main", "run")


async def run(
    url: str, prompt: str, *, tenant: str = "demo", config: PolicyConfig | None = None
) -> str:
    """Stream one answer from the TGI server at ``url`` through a gate; its text,
    or a line saying why there is none."""
    # --8<-- [start:run]
    async with (
        MetricsScraper(f"{url}/metrics", engine="tgi") as metrics,
        Gate(config or PolicyConfig(), signals=metrics) as gate,
        AsyncInferenceClient(model=url) as client,
    ):
        gated = GatedInferenceClient(client, gate)
        try:
            stream = await gated.text_generation_stream(prompt, max_new_tokens=128, tenant=tenant)
            async with stream:
                text = "".join([event.token.text async for event in stream])
        except Rejected as refused:
            return f"refused by the gate: {refused.code} (retry after {refused.retry_after} s)"
        except EngineError as failed:
            return f"TGI said no: {failed.code}: {failed.message}"
        finished = stream.finished
        assert finished is not None
        ttft = finished.ttft or 0.0
        print(f"[{finished.output_tokens} tokens, TTFT {ttft * 1000:.0f} ms]", file=sys.stderr)
        return text
    # --8<-- [end:run]


def main() -> None:
    """The command line: ``URL [PROMPT...]``."""
    url, prompt = sys.argv[1], " ".join(sys.argv[2:]) or "Hello"
    print(anyio.run(run, url, prompt))


if __name__ == "__main__":
    main()
