"""fast_init builds the same frozen records the dataclass __init__ would."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import Admit, Defer, Demote, Finished, Outcome, Reason, Reject, Request
from slopolicy.core.cost.estimator import TokenEstimate
from slopolicy.core.fast_init import fast_init
from slopolicy.core.lifecycle import Dispatch, Started


@fast_init
@dataclasses.dataclass(frozen=True, slots=True)
class _Sample:
    name: str
    count: int
    ratio: float = 0.5
    tags: Mapping[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class _Plain:  # the same fields, with the dataclass's own __init__
    name: str
    count: int
    ratio: float = 0.5
    tags: Mapping[str, float] = dataclasses.field(default_factory=dict)


@given(
    name=st.text(max_size=5),
    count=st.integers(),
    ratio=st.none() | st.floats(allow_nan=False),
    tags=st.none() | st.dictionaries(st.text(max_size=3), st.floats(allow_nan=False)),
)
def test_fields_defaults_and_factories_match_the_dataclass(
    name: str, count: int, ratio: float | None, tags: dict[str, float] | None
) -> None:
    extra: dict[str, object] = {}
    if ratio is not None:
        extra["ratio"] = ratio
    if tags is not None:
        extra["tags"] = tags
    fast, plain = _Sample(name, count, **extra), _Plain(name, count, **extra)  # type: ignore[arg-type]
    assert dataclasses.astuple(fast) == dataclasses.astuple(plain)
    assert fast == _Sample(name=name, count=count, **extra)  # type: ignore[arg-type]


def test_the_signature_reads_as_the_dataclass_one() -> None:
    assert str(inspect.signature(_Sample)) == "(name, count, ratio=0.5, tags=<factory>)"


def test_each_default_factory_call_is_fresh() -> None:
    first, second = _Sample("a", 1), _Sample("b", 2)
    assert first.tags == {}
    assert first.tags is not second.tags


def test_records_stay_frozen_and_work_with_dataclass_tools() -> None:
    record = _Sample("a", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.count = 2  # type: ignore[misc]
    assert dataclasses.replace(record, count=3) == _Sample("a", 3)
    assert pickle.loads(pickle.dumps(record)) == record
    assert repr(record) == "_Sample(name='a', count=1, ratio=0.5, tags={})"


@fast_init
@dataclasses.dataclass(frozen=True, slots=True)
class _Mixed:
    name: str
    _: dataclasses.KW_ONLY
    count: int
    ratio: float = 0.5


@dataclasses.dataclass(frozen=True, slots=True)
class _PlainMixed:
    name: str
    _: dataclasses.KW_ONLY
    count: int
    ratio: float = 0.5


@fast_init
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Keywords:
    ratio: float = 0.5
    count: int  # no default after one with a default: fine when keyword-only


def test_keyword_only_fields_stay_keyword_only() -> None:
    assert str(inspect.signature(_Mixed)) == "(name, *, count, ratio=0.5)"
    assert str(inspect.signature(_Keywords)) == "(*, ratio=0.5, count)"
    assert dataclasses.astuple(_Mixed("a", count=2)) == dataclasses.astuple(
        _PlainMixed("a", count=2)
    )
    assert _Keywords(count=3) == _Keywords(ratio=0.5, count=3)
    with pytest.raises(TypeError):
        _Mixed("a", 2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Keywords(0.5, 3)  # type: ignore[call-arg]


def test_missing_or_unknown_arguments_fail_as_a_dataclass_would() -> None:
    with pytest.raises(TypeError):
        _Sample("a")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Sample("a", 1, color="red")  # type: ignore[call-arg]


def test_only_frozen_slotted_dataclasses_without_post_init_are_taken() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclasses.dataclass(slots=True)
    class NotFrozen:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        x: int

        def __post_init__(self) -> None:
            pass

    for cls in (NoSlots, NotFrozen, PostInit, int):
        with pytest.raises(TypeError):
            fast_init(cls)


def test_the_library_records_construct_by_keyword() -> None:
    request = Request(id="r", prompt_tokens=1, max_new_tokens=1)
    finished = Finished(
        id="r",
        tenant="t",
        lane="l",
        outcome=Outcome.COMPLETED,
        arrival=0.0,
        finished_at=1.0,
        queue_wait=None,
        ttft=None,
        tpot=None,
        prompt_tokens=1,
        output_tokens=0,
        cost=1.0,
    )
    assert finished.stages == {}
    assert (
        Started(id="r", tenant="t", lane="l", request=request, kv_blocks=1, queue_wait=0.0).rungs
        == ()
    )
    assert Dispatch(started=(), expired=()).ladder is None
    assert (
        Admit(
            lane="l", tier="default", request=request, prompt_tokens=1, cost=1.0, message="ok"
        ).steps
        == ()
    )
    assert (
        Demote(
            lane="l",
            from_lane="m",
            tier="default",
            request=request,
            prompt_tokens=1,
            cost=1.0,
            message="ok",
            reason=Reason.RULE,
        ).steps
        == ()
    )
    assert Defer(reason=Reason.QUEUE_FULL, message="full", retry_after=1.0).http_status == 503
    assert Reject(reason=Reason.RULE, message="no", http_status=403).lane is None
    assert TokenEstimate(tokens=3, exact=True, rel_stderr=0.0, method="given").upper == 3


@pytest.mark.parametrize(
    "record", [Finished, Started, Dispatch, Admit, Demote, Defer, Reject, TokenEstimate]
)
def test_the_library_records_refuse_positional_arguments(record: type) -> None:
    # Defer(reason, message, 503) once type-checked and set retry_after=503.
    with pytest.raises(TypeError, match="positional"):
        record(Reason.RULE, "no", 503)
