"""Bounded attribute values: the label policies, and the series a flood of tenants makes."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from slopolicy import Admit, Defer, Finished, Outcome, Reason, Request, UsageError
from slopolicy.core.lifecycle import Dispatch, Started
from slopolicy.telemetry import FirstSeenLabels, Recorder, Telemetry, TopLabels
from tests.runtime.conftest import policy
from tests.telemetry.otel import AttributeSetCounter, Otel


def _feed(labels: TopLabels, names: list[str]) -> list[str]:
    return [labels.label(name) for name in names]


def test_the_allow_list_is_named_and_everyone_else_is_other() -> None:
    labels = TopLabels(["acme", "globex"], top=0)
    assert _feed(labels, ["acme", "initech", "globex", "acme"]) == [
        "acme",
        "other",
        "globex",
        "acme",
    ]
    assert labels.statistics().named == {"acme", "globex"}
    assert labels.statistics().tracked == 0  # top=0 counts nothing


def test_the_heaviest_tenants_are_named_from_the_next_rerank_on() -> None:
    labels = TopLabels(top=2, every=100, min_count=4)
    # 40% big, 30% medium, the rest one request each from 3,000 small tenants.
    stream = []
    small = (f"small-{k}" for k in itertools.count())
    for k in range(3000):
        stream.append("big" if k % 10 < 4 else "medium" if k % 10 < 7 else next(small))
    first = _feed(labels, stream[:99])
    assert set(first) == {"other"}  # no re-rank yet: nobody named by traffic
    _feed(labels, stream[99:])
    assert labels.statistics().named == {"big", "medium"}
    assert labels.label("big") == "big"
    assert labels.label("small-0") == "other"
    assert labels.statistics().tracked <= 64  # the summary's capacity


def test_peek_reports_the_label_without_counting_a_request() -> None:
    labels = TopLabels(["vip"], top=1, every=4, min_count=1)
    for _ in range(100):
        assert labels.peek("busy") == "other"  # peeks never rank "busy"
    assert labels.statistics().observed == 0
    assert labels.peek("vip") == "vip"
    for _ in range(4):
        labels.label("busy")
    assert labels.peek("busy") == "busy"
    assert labels.statistics().observed == 4


def test_a_hundred_thousand_equal_tenants_name_nobody() -> None:
    labels = TopLabels(top=10)
    values = set(_feed(labels, [f"tenant-{k}" for k in range(100_000)]))
    assert values == {"other"}
    stats = labels.statistics()
    assert stats.named == frozenset()
    assert stats.tracked <= 80  # capacity max(64, 8 * top): bounded memory
    assert stats.observed == 100_000


def test_names_ever_given_are_capped_whatever_the_traffic_does() -> None:
    labels = TopLabels(top=1, every=50, min_count=4, max_named=3)
    seen: set[str] = set()
    for epoch in range(20):  # a new heavy tenant every epoch
        seen.update(_feed(labels, [f"heavy-{epoch}"] * 50))
    assert labels.statistics().ever_named == 3
    assert seen == {"other", "heavy-0", "heavy-1", "heavy-2"}
    # A tenant named before may come back even at the cap.
    assert set(_feed(labels, ["heavy-1"] * 150)) == {"heavy-1", "other"}
    assert labels.label("heavy-1") == "heavy-1"


def test_first_seen_labels_name_the_first_few() -> None:
    models = FirstSeenLabels(["llama"], limit=2)
    assert [models.label(m) for m in ("a", "llama", "b", "c", "a")] == [
        "a",
        "llama",
        "b",
        "other",
        "a",
    ]
    assert models.statistics().named == {"llama", "a", "b"}


@pytest.mark.parametrize(
    "make",
    [
        lambda: TopLabels("acme"),
        lambda: TopLabels(top=-1),
        lambda: TopLabels(every=0),
        lambda: TopLabels(capacity=True),
        lambda: FirstSeenLabels(limit=-1),
        lambda: Telemetry(refresh_every=0),
    ],
)
def test_bad_settings_raise(make: object) -> None:
    with pytest.raises(UsageError):
        make()  # type: ignore[operator]


def test_a_hundred_thousand_tenants_make_a_bounded_number_of_attribute_sets() -> None:
    """100,000 distinct tenants, one request each, among three heavy tenants
    and an allow-listed one: every attribute set any instrument is handed is
    counted, over the whole run."""
    counter = AttributeSetCounter()
    telemetry = Telemetry(meter_provider=counter, tenants=TopLabels(["vip"], top=3))
    recorder = telemetry.bind(policy())
    heavy = ("heavy-a", "heavy-b", "heavy-c")
    tenants = (f"tenant-{k}" for k in range(100_000))
    refusal = Defer(
        reason=Reason.RATE_LIMITED,
        message="slow down",
        retry_after=1.0,
        http_status=429,
        lane="interactive",
    )
    k = 0
    while (tenant := _next_tenant(k, heavy, tenants)) is not None:
        request = Request(id=f"r{k}", tenant=tenant, prompt_tokens=10)
        if k % 4 == 3:  # a quarter run to the end, the rest are refused: both paths count
            _run_one(recorder, request, float(k))
        else:
            recorder.submitted(request, refusal, float(k))
        k += 1
    assert k > 130_000
    assert recorder.in_flight == 0

    tenant_values = {
        dict(attributes).get("slopolicy.tenant")
        for sets in counter.seen.values()
        for attributes in sets
    }
    assert tenant_values - {None} == {"vip", "other", *heavy}
    sizes = {name: len(sets) for name, sets in counter.seen.items()}
    assert max(sizes.values()) <= 15, sizes
    assert sum(sizes.values()) <= 60, sizes
    assert telemetry.tenants.statistics().tracked <= 64


def _next_tenant(k: int, heavy: tuple[str, ...], tenants: Iterator[str]) -> str | None:
    if k == 7:
        return "vip"
    if k % 10 < 3:
        return heavy[k % 3]
    return next(tenants, None)


def _run_one(recorder: Recorder, request: Request, now: float) -> None:
    decision = Admit(
        lane="interactive",
        tier="default",
        request=request,
        prompt_tokens=10,
        cost=10.0,
        message="admitted",
    )
    recorder.submitted(request, decision, now)
    started = Started(
        id=request.id,
        tenant=request.tenant,
        lane="interactive",
        request=request,
        kv_blocks=1,
        queue_wait=0.0,
    )
    recorder.dispatched(Dispatch(started=(started,), expired=()), now)
    finished = Finished(
        id=request.id,
        tenant=request.tenant,
        lane="interactive",
        outcome=Outcome.COMPLETED,
        arrival=now,
        finished_at=now + 0.1,
        queue_wait=0.0,
        ttft=0.02,
        tpot=0.01,
        prompt_tokens=10,
        output_tokens=3,
        cost=13.0,
        stages={"queue": 0.0},
    )
    recorder.ended(finished)


def test_gates_sharing_a_provider_share_instruments_and_keep_their_series(otel: Otel) -> None:
    """Two Telemetry objects on one provider (two engines behind one gateway)."""
    a = otel.telemetry(attributes={"server.address": "a"})
    b = otel.telemetry(attributes={"server.address": "b"})
    assert a.instruments is b.instruments  # the SDK would drop b's gauge callbacks otherwise
    for telemetry, name in ((a, "x"), (b, "y")):
        _run_one(telemetry.bind(policy()), Request(id=name, tenant="t", prompt_tokens=1), 0.0)
    metrics = otel.metrics()
    outcomes = metrics["slopolicy.request.outcomes"]
    assert {dict(attrs)["server.address"] for attrs in outcomes.attribute_sets()} == {"a", "b"}
