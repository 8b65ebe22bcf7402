"""Output limits on the wire: whatever mix of ``max_tokens`` and
``max_completion_tokens`` a caller sends (a gateway forwarding JSON sends
nulls), the engine gets the policy's cap under every name given a value, and
generates no more (the real ``openai`` client, a vLLM-like server)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slopolicy import InvalidRequest
from slopolicy.errors import UsageError
from tests.adapters.clients import HELLO, drain, openai_gate, tgi_gate
from tests.adapters.servers import Recorder, Script

pytestmark = pytest.mark.anyio

_NAMES = ("max_tokens", "max_completion_tokens")
_CAPS = {"interactive": 64, "batch": 512}  # the lanes' max_new_tokens (tests/adapters/conftest)
_DEFAULT = 256  # GatedOpenAI's default_max_tokens
_ids = itertools.count()

#: A limit keyword left out, given as None (JSON null), or given a count.
limit = st.one_of(st.just("absent"), st.none(), st.integers(1, 700))


def _expected_cap(given: dict[str, Any], lane: str) -> int:
    # vLLM honours max_completion_tokens over max_tokens; the gate reserves for it.
    chosen = given.get("max_completion_tokens") or given.get("max_tokens") or _DEFAULT
    return min(chosen, _CAPS[lane])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(max_tokens=limit, max_completion_tokens=limit, lane=st.sampled_from(sorted(_CAPS)))
async def test_every_limit_name_given_carries_the_cap(
    vllm_url: str, recorder: Recorder, max_tokens: object, max_completion_tokens: object, lane: str
) -> None:
    name = f"limits-{next(_ids)}"
    headers = recorder.script(name, Script(tokens=1000))
    params: dict[str, Any] = {
        key: value
        for key, value in zip(_NAMES, (max_tokens, max_completion_tokens), strict=True)
        if value != "absent"
    }
    async with openai_gate(vllm_url) as (client, _):
        reply = await client.chat(
            model="m", messages=HELLO, lane=lane, extra_headers=headers, **params
        )
    body = recorder.hit(name).body
    given = {key: value for key, value in params.items() if value is not None}
    cap = _expected_cap(given, lane)
    on_wire = {key: body[key] for key in _NAMES if key in body}
    assert on_wire == dict.fromkeys(given or ["max_tokens"], cap), (params, on_wire)
    assert reply.finished.output_tokens == cap  # what the engine generated
    assert reply.response.usage is not None
    assert reply.response.usage.completion_tokens == cap


async def test_a_null_name_does_not_wipe_out_the_other(vllm_url: str, recorder: Recorder) -> None:
    """The reproduction: a stream with ``max_tokens=10, max_completion_tokens=None``
    went out as ``max_completion_tokens: 256`` and generated 256 tokens."""
    headers = recorder.script("null-limit", Script(tokens=1000))
    async with openai_gate(vllm_url) as (client, _):
        stream = await client.chat_stream(
            model="m",
            messages=HELLO,
            lane="batch",
            max_tokens=10,
            max_completion_tokens=None,
            extra_headers=headers,
        )
        async with stream:
            chunks = await drain(stream)
    body = recorder.hit("null-limit").body
    assert body["max_tokens"] == 10
    assert "max_completion_tokens" not in body
    assert sum(bool(c.choices[0].delta.content) for c in chunks) == 10
    assert stream.finished is not None
    assert stream.finished.output_tokens == 10


@pytest.mark.parametrize(
    ("keyword", "bad"),
    [
        *(("max_tokens", bad) for bad in ("10", 2.5, True, [10], 0)),
        ("max_completion_tokens", -1),
        ("n", 0),
        ("n", "2"),
    ],
)
async def test_a_count_that_is_not_one_is_refused_before_admission(
    vllm_url: str, recorder: Recorder, keyword: str, bad: object
) -> None:
    headers = recorder.script("bad-limit", Script())
    params: dict[str, Any] = {keyword: bad}
    async with openai_gate(vllm_url) as (client, p):
        with pytest.raises(InvalidRequest):
            await client.chat(model="m", messages=HELLO, extra_headers=headers, **params)
        assert p.statistics().submitted == 0
    assert recorder.hits["bad-limit"] == []


async def test_a_null_n_is_one(vllm_url: str, recorder: Recorder) -> None:
    headers = recorder.script("null-n", Script(tokens=2))
    async with openai_gate(vllm_url) as (client, _):
        reply = await client.chat(model="m", messages=HELLO, n=None, extra_headers=headers)
    assert len(reply.response.choices) == 1
    assert reply.finished.output_tokens == 2


@pytest.mark.parametrize(
    "smuggled", [{"max_tokens": 5000}, {"max_completion_tokens": 5000}, {"n": 8}, {"model": "big"}]
)
async def test_extra_body_cannot_carry_what_the_gate_decides(
    vllm_url: str, tgi_url: str, recorder: Recorder, smuggled: dict[str, Any]
) -> None:
    """The clients merge ``extra_body`` over the request's own fields: a
    ``max_tokens`` there went out uncapped (the gate had reserved 64 tokens)."""
    headers = recorder.script("smuggled", Script(tokens=1000))
    async with openai_gate(vllm_url) as (client, p):
        with pytest.raises(UsageError, match="extra_body"):
            await client.chat(model="m", messages=HELLO, extra_body=smuggled, extra_headers=headers)
        assert p.statistics().submitted == 0
    async with tgi_gate(tgi_url, headers) as (tgi, p):
        with pytest.raises(UsageError, match="extra_body"):
            await tgi.chat(HELLO, extra_body=smuggled)
        assert p.statistics().submitted == 0
    assert recorder.hits["smuggled"] == []


async def test_extra_body_carries_the_engines_own_fields(vllm_url: str, recorder: Recorder) -> None:
    """And the lane's priority wins over the caller's, header (vLLM's
    X-Vllm-Priority overrides the body's) or body."""
    headers = recorder.script("extra-fields", Script(tokens=2)) | {"X-Vllm-Priority": "-99"}
    async with openai_gate(vllm_url, priorities={"interactive": -1}) as (client, _):
        await client.chat(
            model="m",
            messages=HELLO,
            extra_body={"top_k": 5, "min_tokens": 1},
            extra_headers=headers,
        )
    hit = recorder.hit("extra-fields")
    assert (hit.body["top_k"], hit.body["min_tokens"], hit.body["priority"]) == (5, 1, -1)
    assert "x-vllm-priority" not in hit.headers
