"""Wrap an ``openai.AsyncOpenAI`` client so every call goes through a slopolicy Gate.

Run it against ``vllm serve`` (or SGLang, or TGI's Messages API;
``pip install 'slopolicy[openai]'``)::

    python -m examples.openai_wrapper http://127.0.0.1:8000/v1 my-model "Write a haiku"

The client is the openai client, unchanged, but its own retries are off
(the gate decided once; a blind retry would send the request again). The
gate caps ``max_tokens`` by lane, passes vLLM's ``priority`` for the lane,
and settles the tenant's charge with the engine's own usage count.
"""

from __future__ import annotations

import sys

import anyio
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from slopolicy import Gate, PolicyConfig, Rejected
from slopolicy.adapters import EngineError
from slopolicy.adapters.openai import GatedOpenAI

__all__ = ("main", "run")

#: vLLM priority per lane (lower runs first; needs ``--scheduling-policy priority``).
PRIORITIES = {"interactive": 0, "heavy": 5, "background": 10}


async def run(
    base_url: str, model: str, prompt: str, *, config: PolicyConfig | None = None
) -> tuple[str, str]:
    """A whole answer, then a streamed one, through a gate: their texts (or why
    there is none)."""
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": prompt}]
    # --8<-- [start:wrap]
    async with (
        Gate(config or PolicyConfig()) as gate,
        AsyncOpenAI(base_url=base_url, api_key="-") as client,
    ):
        gated = GatedOpenAI(client, gate, priorities=PRIORITIES)
        try:
            reply = await gated.chat(model=model, messages=messages, max_tokens=64, tenant="acme")
            whole = reply.response.choices[0].message.content or ""

            stream = await gated.chat_stream(model=model, messages=messages, tenant="acme")
            async with stream:  # an abandoned stream releases its ticket at once
                pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        except Rejected as refused:  # the gate said no: nothing was sent
            return "", f"refused by the gate: {refused.code}"
        except EngineError as failed:  # the engine said no (503, 400, an error in the stream)
            return "", f"the engine said no: {failed.code}: {failed.message}"
    done = stream.finished  # the policy's record: seconds and tokens
    assert done is not None
    print(f"[TTFT {done.ttft} s, TPOT {done.tpot} s, {done.output_tokens} tokens]", file=sys.stderr)
    # --8<-- [end:wrap]
    return whole, "".join(pieces)


def main() -> None:
    """The command line: ``BASE_URL MODEL [PROMPT...]``."""
    base_url, model = sys.argv[1], sys.argv[2]
    print(*anyio.run(run, base_url, model, " ".join(sys.argv[3:]) or "Hello"), sep="\n")


if __name__ == "__main__":
    main()
