"""The pieces every adapter builds on (``slopolicy.adapters.calls``): the relay's
release however it ends, and the check on an engine's own token counts."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import Gate, Outcome, Request
from slopolicy.adapters import EngineError, EngineFault
from slopolicy.adapters.calls import relay, sent
from slopolicy.adapters.common import check_default_max_tokens, check_priorities, engine_count
from slopolicy.adapters.vllm import classify
from slopolicy.errors import UsageError
from tests.adapters.conftest import policy
from tests.runtime.conftest import anyio_backend as anyio_backend  # virtual time
from tests.runtime.conftest import assert_clean


class _Chunks:
    """An engine's stream (not a generator: ``close`` is what closes it)."""

    def __init__(self) -> None:
        self.next = 0

    def __aiter__(self) -> AsyncIterator[int]:
        return self

    async def __anext__(self) -> int:
        self.next += 1
        return self.next - 1


@pytest.mark.anyio
async def test_closing_the_relay_itself_releases_the_ticket() -> None:
    """What a garbage-collected relay goes through: closed at a yield."""
    closed: list[bool] = []

    async def close() -> None:
        closed.append(True)

    p = policy()
    async with Gate(p) as gate:
        ticket = await gate.admit(Request(prompt="hi", max_new_tokens=8))
        relayed = relay(
            ticket,
            _Chunks(),
            watch=lambda c: True,
            classify=classify,
            settle=lambda: 0,
            close=close,
        )
        assert await relayed.__anext__() == 0
        await relayed.aclose()
        assert ticket.finished is not None
        assert ticket.finished.outcome is Outcome.CANCELLED
        assert closed == [True]  # after the release
        assert_clean(p)


numbers = st.one_of(
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
)


@given(value=numbers, budget=st.integers(1, 10**6))
def test_an_engine_count_is_a_count_within_the_budget_or_unknown(
    value: object, budget: int
) -> None:
    counted = engine_count(value, budget)
    believable = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= budget
    assert counted == (value if believable else None)


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "256", None])
def test_a_default_limit_must_be_a_count(bad: object) -> None:
    with pytest.raises(UsageError, match="default_max_tokens"):
        check_default_max_tokens(bad)  # type: ignore[arg-type]
    assert check_default_max_tokens(1) == 1


@pytest.mark.parametrize("bad", ["high", 1.5, True, None])
def test_priorities_must_be_integers(bad: object) -> None:
    with pytest.raises(UsageError, match=r"priorities\['batch'\]"):
        check_priorities({"interactive": -1, "batch": bad})  # type: ignore[dict-item]
    assert check_priorities(None) == {}


@pytest.mark.anyio
async def test_a_classifier_that_raises_still_releases_as_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An engine's error the adapter's classifier cannot read must not skip the release."""

    def broken(error: Exception) -> EngineError:
        raise TypeError("cannot read it")

    async def refused() -> None:
        raise ConnectionError("the engine said something odd")

    p = policy()
    async with Gate(p) as gate:
        ticket = await gate.admit(Request(prompt="hi", max_new_tokens=8))
        with pytest.raises(EngineError) as caught:
            await sent(ticket, refused(), classify=broken)
        assert_clean(p)
    assert caught.value.fault is EngineFault.FAILED
    assert caught.value.finished is not None
    assert caught.value.finished.outcome is Outcome.FAILED
    assert "classifying ConnectionError failed" in caplog.text


def test_classifiers_read_errors_whose_fields_are_garbage() -> None:
    """Engine errors with a status that is no int, or a body that is no
    object: classified (by what can be read), never raising."""
    from huggingface_hub.errors import HfHubHTTPError, TextGenerationError

    from slopolicy.adapters.common import fault_from_status
    from slopolicy.adapters.tgi import classify as tgi_classify

    assert fault_from_status("503", "x").fault is EngineFault.FAILED  # type: ignore[arg-type]
    assert fault_from_status(True, "x").engine_status is None
    # huggingface_hub raises the Messages API's in-stream error object as is.
    fields = {"message": "Model is overloaded", "http_status_code": "x"}
    odd = TextGenerationError(fields)  # type: ignore[arg-type]
    assert tgi_classify(odd).fault is EngineFault.OVERLOADED
    listed = httpx.Response(422, json=[1, 2], request=httpx.Request("POST", "http://tgi/"))
    error = HfHubHTTPError("422", response=listed)  # type: ignore[arg-type]
    assert tgi_classify(error).fault is EngineFault.INVALID_REQUEST
