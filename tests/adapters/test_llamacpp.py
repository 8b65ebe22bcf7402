"""llama.cpp's signals from ``/slots`` and ``/metrics``, without a server: pages
captured from llama-server (``tests/adapters/pages/llamacpp*``) and ones built
here, answered through ``httpx.MockTransport``. ``tests/live`` runs the
scraper against the real server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy.adapters.llamacpp import LlamaCppScraper, SlotUse, read_slots
from slopolicy.adapters.metrics import ENGINES, LLAMACPP, read_page
from slopolicy.errors import UsageError
from slopolicy.testing import ManualClock

PAGES = Path(__file__).parent / "pages"


def slot(number: int, tokens: int = 0, decoded: int = 0, *, task: int | None = None) -> object:
    """One ``/slots`` entry: processing when ``task`` is given."""
    entry: dict[str, Any] = {"id": number, "n_ctx": 1000, "is_processing": task is not None}
    if task is not None:
        entry |= {"id_task": task, "n_prompt_tokens": tokens}
        entry["next_token"] = [{"has_next_token": True, "n_remain": 9, "n_decoded": decoded}]
    return entry


def metrics(predicted: float, prompt: float = 0.0, deferred: int = 0) -> str:
    return (
        "# TYPE llamacpp:prompt_tokens_total counter\n"
        f"llamacpp:prompt_tokens_total {prompt}\n"
        "# TYPE llamacpp:tokens_predicted_total counter\n"
        f"llamacpp:tokens_predicted_total {predicted}\n"
        "# TYPE llamacpp:requests_deferred gauge\n"
        f"llamacpp:requests_deferred {deferred}\n"
    )


Poll = tuple[object, str, str]  # (/slots JSON, /metrics text, process start time)


def scraper(polls: list[Poll | int], clock: ManualClock, **options: Any) -> LlamaCppScraper:
    """A scraper whose server answers each poll's two pages in turn (an int:
    that status for ``/slots``)."""
    answers = iter(polls)
    current: list[Poll] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slots":
            item = next(answers)
            if isinstance(item, int):
                return httpx.Response(item, json={"error": {"message": "no"}})
            current[:] = [item]
            return httpx.Response(200, json=item[0])
        _, text, epoch = current[0]
        return httpx.Response(200, text=text, headers={"Process-Start-Time-Unix": epoch})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    return LlamaCppScraper("http://llama:8080/", client=client, clock=clock, **options)


def test_the_metrics_page_of_a_busy_server() -> None:
    reading = read_page((PAGES / "llamacpp.txt").read_text(), LLAMACPP)
    assert ENGINES["llamacpp"] is LLAMACPP
    assert (reading.waiting, reading.running, reading.generated_tokens) == (1, 2, 0.0)
    assert reading.kv_usage is None  # llama.cpp exports none: /slots has it


def test_the_slots_page_of_a_busy_server() -> None:
    slots = read_slots(json.loads((PAGES / "llamacpp-slots.json").read_text()))
    assert slots == (
        SlotUse(id=0, processing=True, tokens=21, capacity=2048, decoded=1, task=1),
        SlotUse(id=1, processing=True, tokens=311, capacity=2048, decoded=1, task=0),
    )
    assert slots[1].usage == pytest.approx(311 / 2048)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
)
_FIELDS = st.sampled_from(["id", "n_ctx", "is_processing", "n_prompt_tokens", "next_token"])
_SLOTS = st.lists(st.dictionaries(_FIELDS, _JSON | st.integers(0, 9)), max_size=3)


@given(_JSON | _SLOTS)
def test_any_answer_is_read_or_refused_with_a_value_error(data: object) -> None:
    try:
        slots = read_slots(data)
    except ValueError:
        return
    assert slots
    for one in slots:
        assert one.capacity >= 1
        assert min(one.tokens, one.decoded, one.id) >= 0
        assert 0 <= one.usage <= 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_running_waiting_kv_and_the_decode_rate_counting_running_streams() -> None:
    clock = ManualClock(100.0)
    polls: list[Poll | int] = [
        ([slot(0, 120, 20, task=7), slot(1)], metrics(50, prompt=100, deferred=2), "1"),
        # Task 7 decoded 30 more while running (the counter has not moved).
        ([slot(0, 150, 50, task=7), slot(1, 210, 10, task=8)], metrics(50, prompt=300), "1"),
        # Task 7 ended with 60 tokens: the counter has them, its slot is idle.
        ([slot(0), slot(1, 230, 30, task=8)], metrics(110, prompt=300), "1"),
    ]
    async with scraper(polls, clock) as scrape:
        first = await scrape()
        clock.advance(2.0)
        second = await scrape()
        clock.advance(2.0)
        third = await scrape()
    assert first is not None and second is not None and third is not None  # noqa: PT018
    assert (first.running, first.waiting, first.kv_usage) == (1, 2, 120 / 2000)
    assert first.kv_capacity_tokens == 2000  # the slots' n_ctx summed
    assert first.decode_tps is None  # a rate needs two polls
    assert second.decode_tps == pytest.approx((30 + 10) / 2.0)
    assert (second.running, second.kv_usage) == (2, 360 / 2000)
    assert third.decode_tps == pytest.approx((10 + 20) / 2.0)
    last = scrape.last
    assert last is not None
    assert (last.kv_tokens, last.kv_capacity, last.predicted_total) == (230, 2000, 110)
    assert last.prompt_tps == 0.0
    assert scrape.url == "http://llama:8080/metrics"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_rates_start_over_after_a_restart_and_skip_a_torn_poll() -> None:
    clock = ManualClock(0.0)
    polls: list[Poll | int] = [
        ([slot(0, 50, 10, task=1)], metrics(100, prompt=40), "1"),
        # Read across task 1's end: its 12 tokens counted in /slots and /metrics.
        ([slot(0, 52, 12, task=1)], metrics(112, prompt=40), "1"),
        ([slot(0, 60, 4, task=2)], metrics(112, prompt=60), "1"),
        ([slot(0, 60, 8, task=2)], metrics(112, prompt=60), "1"),
        # Restarted: a new process, whose counters happen to be higher.
        ([slot(0, 20, 2, task=1)], metrics(500, prompt=900), "2"),
        503,  # a failed poll: no update, the rates keep their baseline
        ([slot(0, 20, 6, task=1)], metrics(500, prompt=900), "2"),
    ]
    rates: list[float | None] = []
    prompts: list[float | None] = []
    async with scraper(polls, clock) as scrape:
        for _ in polls:
            signals = await scrape()
            rates.append(None if signals is None else signals.decode_tps)
            prompts.append(None if scrape.last is None else scrape.last.prompt_tps)
            clock.advance(1.0)
    # 110 -> 124 (task 1's 12 counted twice) -> 116 (went back: no rate) -> 120
    assert rates[:4] == [None, 14.0, None, 4.0]
    assert rates[4] is None  # restarted
    assert rates[5] is None  # the failed poll
    assert rates[6] == pytest.approx(4 / 2.0)  # two seconds since the last good poll
    assert prompts[2] == 20.0
    assert scrape.failures == 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_unified_kv_pool_is_given_in_tokens() -> None:
    # With --kv-unified every slot reports the whole pool as its context.
    polls: list[Poll | int] = [
        ([slot(0, 300, 1, task=1), slot(1, 100, 1, task=2)], metrics(0), "1")
    ]
    async with scraper(polls, ManualClock(0.0), kv_tokens=1000) as scrape:
        signals = await scrape()
    assert signals is not None
    assert signals.kv_usage == 0.4
    assert signals.kv_capacity_tokens == 1000


@pytest.mark.parametrize("kv_tokens", [0, -5, 1.5, True, "100"])
def test_bad_settings(kv_tokens: object) -> None:
    with pytest.raises(UsageError):
        LlamaCppScraper("http://llama:8080", kv_tokens=kv_tokens)  # type: ignore[arg-type]
