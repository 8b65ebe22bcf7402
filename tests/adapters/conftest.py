from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from slopolicy import EngineSignals, Gate, Policy, PolicyConfig
from slopolicy.core.cost.tokens import HeuristicCounter
from tests.adapters.servers import Recorder, ServerThread
from tests.adapters.tgi_server import TGIApp
from tests.adapters.vllm_server import VLLMApp


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real time on both backends: the engines are real sockets."""
    return str(request.param)


@pytest.fixture(scope="session")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="session")
def vllm_url(recorder: Recorder) -> Iterator[str]:
    """A vLLM-like OpenAI server on 127.0.0.1 for the whole session."""
    server = ServerThread(VLLMApp(recorder)).start()
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def tgi_url(recorder: Recorder) -> Iterator[str]:
    """A TGI-like router on 127.0.0.1 for the whole session."""
    server = ServerThread(TGIApp(recorder)).start()
    yield server.url
    server.stop()


def config(**overrides: Any) -> PolicyConfig:
    """Two lanes (interactive caps outputs at 64 tokens), room for 4 running."""
    data: dict[str, Any] = {
        "lanes": [
            {"name": "interactive", "max_new_tokens": 64, "max_prompt_tokens": 2000, "weight": 4},
            {"name": "batch", "max_new_tokens": 512, "max_prompt_tokens": 8000, "weight": 1},
        ],
        "tiers": {"default": {"rate": 1e6, "burst": 1e6, "max_concurrency": 16}},
        "kv": {"num_blocks": 4000, "block_size": 16},
        "engine": {"max_running": 4},
        "ladder": {"enabled": False},
    }
    data.update(overrides)
    return PolicyConfig.from_dict(data)


def policy(**overrides: Any) -> Policy:
    return Policy(config(**overrides), counter=HeuristicCounter())


#: A ladder that drops optional features, then sends the batch lane to "small";
#: it climbs a rung per 50 ms of full KV.
LADDER: dict[str, Any] = {
    "enabled": True,
    "rungs": ["drop_optional_features", "cheaper_model"],
    "cheaper_model": "small",
    "evaluate_every_s": 0.02,
    "dwell_s": 0.05,
    "kv_usage": {"enter": 0.9, "exit": 0.5},
}


async def climb(gate: Gate, level: int) -> None:
    """Report a full KV cache until the ladder stands at ``level`` (real time)."""
    ladder = gate.policy.health.ladder
    with anyio.fail_after(5):
        while ladder is None or ladder.level < level:
            gate.observe(EngineSignals(observed_at=anyio.current_time(), kv_usage=0.99))
            await anyio.sleep(0.02)
            ladder = gate.policy.health.ladder
