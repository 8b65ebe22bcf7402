"""The in-process vLLM adapter against :class:`FakeAsyncLLM` (vLLM's output
semantics), in virtual time on asyncio and trio: timings are exact."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from slopolicy import EngineSignals, Gate, Outcome, Policy, Rejected
from slopolicy.adapters import EngineError, EngineFault
from slopolicy.adapters.vllm import GatedAsyncLLM, classify
from slopolicy.core.kv.shares import KVShares
from slopolicy.core.queueing.demand import TenantDemand
from slopolicy.errors import UsageError
from slopolicy.testing.fake_vllm import (
    CompletionOutput,
    FakeAsyncLLM,
    RequestOutput,
    RequestOutputKind,
    SamplingParams,
)
from tests.adapters.clients import collected
from tests.adapters.conftest import policy
from tests.runtime.conftest import anyio_backend as anyio_backend  # virtual time
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def gated(
    engine: FakeAsyncLLM, p: Policy | None = None, **options: Any
) -> AsyncIterator[tuple[GatedAsyncLLM, Policy]]:
    p = p or policy()
    async with Gate(p) as gate:
        yield GatedAsyncLLM(engine, gate, **options), p


async def drain(stream: AsyncIterator[RequestOutput]) -> list[RequestOutput]:
    return [output async for output in stream]


async def test_cumulative_outputs_are_counted_once_with_exact_timings() -> None:
    engine = FakeAsyncLLM(ttft=0.2, per_token=0.05)
    caller = SamplingParams(max_tokens=1000)
    async with gated(engine, priorities={"interactive": -3}) as (gated_llm, p):
        stream = await gated_llm.generate("tell me a story", caller, tenant="acme")
        async with stream:
            outputs = await drain(stream)
        assert_clean(p)
    call = engine.calls[0]
    assert call.params.max_tokens == 64  # the interactive lane's cap
    assert caller.max_tokens == 1000  # the caller's params are left alone
    assert call.priority == -3
    assert call.request_id == stream.ticket.id
    assert len(outputs) == 64
    assert outputs[-1].outputs[0].token_ids == list(range(64))  # cumulative
    finished = stream.finished
    assert finished is not None
    assert finished.outcome is Outcome.COMPLETED
    assert finished.output_tokens == 64
    assert finished.ttft == pytest.approx(0.2)
    assert finished.tpot == pytest.approx(0.05)


async def test_an_over_share_start_is_sent_past_every_lane_s_priority(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tenant over its share of a saturated engine (its portion below 1)
    while the KV pool is over-asked (a finite level) gets its lane's priority
    plus the map's span: vLLM preempts it first."""
    monkeypatch.setattr(TenantDemand, "_portion", lambda self, tenant, now: 0.5)
    monkeypatch.setattr(KVShares, "level", property(lambda self: 100.0))  # over-asked
    engine = FakeAsyncLLM(ttft=0.1, per_token=0.01, output_tokens=2)
    async with gated(engine, priorities={"interactive": -3, "batch": 3}) as (gated_llm, p):
        stream = await gated_llm.generate("hi", SamplingParams(max_tokens=8), tenant="acme")
        await drain(stream)
        assert_clean(p)
    assert stream.ticket.started.over_share
    assert engine.calls[0].priority == -3 + 7


@pytest.mark.parametrize("kind", [RequestOutputKind.DELTA, RequestOutputKind.CUMULATIVE])
async def test_several_tokens_per_yield_count_as_tokens(kind: RequestOutputKind) -> None:
    engine = FakeAsyncLLM(ttft=0.1, per_token=0.02, tokens_per_step=4, output_tokens=10)
    async with gated(engine) as (gated_llm, p):
        params = SamplingParams(max_tokens=32, output_kind=kind)
        stream = await gated_llm.generate("hi", params, lane="batch")
        outputs = await drain(stream)
        assert_clean(p)
    assert [len(o.outputs[0].token_ids) for o in outputs][-1] == (2 if kind.name == "DELTA" else 10)
    assert len(outputs) == 3  # 4 + 4 + 2 tokens
    finished = stream.finished
    assert finished is not None
    assert finished.output_tokens == 10
    assert finished.ttft == pytest.approx(0.1)
    # Two later steps of 4 and 2 tokens: (0.08 + 0.04) s over 9 token gaps.
    assert finished.tpot == pytest.approx(0.12 / 9)
    assert engine.calls[0].priority == 0  # no priority map: vLLM's default


async def test_final_only_outputs_arrive_at_the_end() -> None:
    engine = FakeAsyncLLM(ttft=0.1, per_token=0.01, output_tokens=5)
    async with gated(engine) as (gated_llm, _):
        params = SamplingParams(max_tokens=8, output_kind=RequestOutputKind.FINAL_ONLY)
        stream = await gated_llm.generate("hi", params)
        outputs = await drain(stream)
    assert len(outputs) == 1
    finished = stream.finished
    assert finished is not None
    assert finished.output_tokens == 5
    assert finished.ttft == pytest.approx(0.14)  # nothing before the end
    assert finished.tpot == 0.0


async def test_parallel_sequences_count_per_sequence() -> None:
    engine = FakeAsyncLLM(ttft=0.1, per_token=0.01, output_tokens=3)
    async with gated(engine) as (gated_llm, p):
        stream = await gated_llm.generate("hi", SamplingParams(n=2, max_tokens=8))
        outputs = await drain(stream)
        assert_clean(p)
    assert {o.outputs[0].index for o in outputs} == {0, 1}
    assert stream.finished is not None
    assert stream.finished.output_tokens == 6


async def test_prompt_forms_and_an_unbounded_max_tokens() -> None:
    engine = FakeAsyncLLM(output_tokens=2)
    async with gated(engine, default_max_tokens=500) as (gated_llm, _):
        ids = {"prompt_token_ids": list(range(300))}
        stream = await gated_llm.generate(ids, SamplingParams(max_tokens=None), lane="batch")
        await drain(stream)
        text = await gated_llm.generate({"prompt": "a b c"}, SamplingParams(), lane="batch")
        await drain(text)
        with pytest.raises(UsageError, match="prompt_tokens"):
            await gated_llm.generate({"multi_modal_data": {}}, SamplingParams())
    assert engine.calls[0].params.max_tokens == 500
    assert stream.finished is not None
    assert stream.finished.prompt_tokens == 300


async def test_sampling_params_that_cannot_take_the_limits_release_the_ticket() -> None:
    engine = FakeAsyncLLM()
    async with gated(engine) as (gated_llm, p):
        with pytest.raises(AttributeError):
            await gated_llm.generate("hi", object())  # no max_tokens to set
        assert_clean(p)
        assert p.statistics().outcomes[Outcome.CANCELLED] == 1
    assert engine.calls == []


async def test_vllm_refusals_come_from_iterating() -> None:
    engine = FakeAsyncLLM(queue_limit=0, max_model_len=100)
    async with gated(engine) as (gated_llm, p):
        stream = await gated_llm.generate("hi", SamplingParams())
        with pytest.raises(EngineError) as overloaded:
            await drain(stream)
        long_prompt = {"prompt_token_ids": list(range(150))}
        engine.queue_limit = None
        stream = await gated_llm.generate(long_prompt, SamplingParams(), lane="batch")
        with pytest.raises(EngineError) as too_long:
            await drain(stream)
        assert_clean(p)
    assert overloaded.value.fault is EngineFault.OVERLOADED
    assert overloaded.value.engine_status == 503
    assert overloaded.value.outcome is Outcome.FAILED
    assert too_long.value.fault is EngineFault.PROMPT_TOO_LONG
    assert too_long.value.param == "input_tokens"
    assert too_long.value.outcome is Outcome.CANCELLED
    assert engine.aborted == []  # vLLM never took them


@pytest.mark.parametrize(
    ("engine", "tokens"),
    [
        (FakeAsyncLLM(fail_at=3, output_tokens=8), 3),
        (FakeAsyncLLM(end_with="error", output_tokens=4), 4),
        (FakeAsyncLLM(end_with="abort", output_tokens=4), 4),
    ],
    ids=["engine-error", "finish-error", "finish-abort"],
)
async def test_failures_while_generating(engine: FakeAsyncLLM, tokens: int) -> None:
    async with gated(engine) as (gated_llm, p):
        stream = await gated_llm.generate("hi", SamplingParams(max_tokens=8))
        with pytest.raises(EngineError) as caught:
            await drain(stream)
        assert_clean(p)
    assert caught.value.fault is EngineFault.FAILED
    assert stream.finished is not None
    assert stream.finished.outcome is Outcome.FAILED
    assert stream.finished.output_tokens == tokens


async def test_cancelling_the_reader_aborts_the_request() -> None:
    engine = FakeAsyncLLM(ttft=0.1, per_token=0.1)
    async with gated(engine) as (gated_llm, p):
        stream = await gated_llm.generate("hi", SamplingParams(max_tokens=50))
        with anyio.move_on_after(1.0):
            async with stream:
                await drain(stream)
        assert_clean(p)
        assert p.statistics().outcomes[Outcome.CANCELLED] == 1
    assert stream.ticket.id in engine.aborted
    assert engine.active == set()


async def test_closing_before_reading_sends_nothing() -> None:
    engine = FakeAsyncLLM()
    async with gated(engine) as (gated_llm, p):
        stream = await gated_llm.generate("hi", SamplingParams())
        await stream.aclose()
        assert_clean(p)
    assert engine.calls == []
    assert engine.aborted == []
    assert stream.finished is not None
    assert stream.finished.outcome is Outcome.CANCELLED


@pytest.mark.parametrize("read", [0, 2], ids=["unread", "some-outputs"])
async def test_a_dropped_stream_is_released_and_aborted_when_collected(read: int) -> None:
    engine = FakeAsyncLLM(ttft=0.1, per_token=0.1)
    async with gated(engine) as (gated_llm, p):
        stream = await gated_llm.generate("hi", SamplingParams(max_tokens=50))
        if read:
            async for _ in stream:
                read -= 1
                if not read:
                    break
        request_id = stream.ticket.id
        with pytest.warns(ResourceWarning, match="never closed"):
            del stream  # the last reference: collected at once
        await collected(p)
        assert_clean(p)
        assert p.statistics().outcomes[Outcome.CANCELLED] == 1
        assert engine.active == set()
    assert (request_id in engine.aborted) == bool(engine.calls)  # started: vLLM aborts


class PlainEngine:
    """A duck-typed engine whose stream is a plain async iterator (no aclose)."""

    def __init__(self) -> None:
        self.aborted: list[str] = []

    def generate(
        self, prompt: Any, sampling_params: Any, request_id: str, **kwargs: Any
    ) -> AsyncIterator[Any]:
        return self._Outputs(request_id)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    class _Outputs:
        def __init__(self, request_id: str) -> None:
            self.request_id = request_id
            self.step = 0

        def __aiter__(self) -> PlainEngine._Outputs:
            return self

        async def __anext__(self) -> RequestOutput:
            await anyio.sleep(0.1)
            self.step += 1
            output = CompletionOutput(0, "t", list(range(self.step)))
            return RequestOutput(self.request_id, None, [], None, [output], False)


async def test_an_engine_that_cannot_close_its_stream_is_aborted() -> None:
    engine = PlainEngine()
    async with Gate(policy()) as gate:
        gated_llm = GatedAsyncLLM(engine, gate)
        stream = await gated_llm.generate("hi", SamplingParams())
        with anyio.move_on_after(0.35):
            await drain(stream)
        await stream.aclose()
    assert engine.aborted == [stream.ticket.id]
    assert stream.finished is not None
    assert stream.finished.output_tokens == 3


async def test_the_ladder_drops_parallel_sampling_and_logprobs() -> None:
    ladder = {
        "enabled": True,
        "rungs": ["drop_optional_features"],
        "evaluate_every_s": 0.5,
        "dwell_s": 1.0,
        "kv_usage": {"enter": 0.9, "exit": 0.5},
    }
    engine = FakeAsyncLLM(output_tokens=2)
    async with gated(engine, policy(ladder=ladder)) as (gated_llm, p):
        gated_llm.gate.observe(EngineSignals(observed_at=anyio.current_time(), kv_usage=0.99))
        await anyio.sleep(2.0)
        gated_llm.gate.observe(EngineSignals(observed_at=anyio.current_time(), kv_usage=0.99))
        assert p.health.ladder is not None
        assert p.health.ladder.level == 1
        stream = await gated_llm.generate("hi", SamplingParams(n=3, logprobs=5, max_tokens=8))
        await drain(stream)
    sent = engine.calls[0].params
    assert (sent.n, sent.logprobs) == (1, None)
    assert stream.ticket.rungs == ("drop_optional_features",)


async def test_a_refusal_by_the_gate_starts_nothing() -> None:
    engine = FakeAsyncLLM()
    async with gated(engine) as (gated_llm, _):
        with pytest.raises(Rejected):
            await gated_llm.generate("x " * 40_000, SamplingParams())
    assert engine.calls == []


def test_classify_reads_vllm_errors_by_status_and_name() -> None:
    class EngineDeadError(Exception):
        pass

    class RetryableRequestError(Exception):
        status_code = 503

    class TooManyRequestsError(Exception):
        http_status = 429

    assert classify(EngineDeadError("dead")).fault is EngineFault.FAILED
    assert classify(RetryableRequestError()).fault is EngineFault.OVERLOADED
    assert classify(TooManyRequestsError()).fault is EngineFault.RATE_LIMITED
    assert classify(ValueError("bad")).fault is EngineFault.INVALID_REQUEST
    assert classify(RuntimeError("?")).fault is EngineFault.FAILED
