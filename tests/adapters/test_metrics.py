"""Engine signal scraping on metric pages in each engine's exposition format
(``tests/adapters/pages``: HELP/TYPE lines, labels, ``_total`` counters,
``_created`` gauges, histograms, several engines of one server)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.lowlevel
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slopolicy import EngineSignals, Gate, Policy, PolicyConfig
from slopolicy.adapters.metrics import (
    ENGINES,
    SGLANG,
    TGI,
    TRTLLM,
    VLLM,
    MetricsScraper,
    read_page,
)
from slopolicy.testing import ManualClock
from tests.adapters.conftest import policy
from tests.adapters.servers import Recorder

PAGES = Path(__file__).parent / "pages"
NOW = 1_790_000_000.0  # wall clock for exposition timestamps


def page(engine: str) -> str:
    return (PAGES / f"{engine}.txt").read_text()


def transport(pages: list[str | Exception | int]) -> httpx.MockTransport:
    """Answers each scrape with the next page, exception or status."""
    answers = iter(pages)

    def answer(request: httpx.Request) -> httpx.Response:
        item = next(answers)
        if isinstance(item, Exception):
            raise item
        if isinstance(item, int):
            return httpx.Response(item, text="error")
        return httpx.Response(200, text=item, headers={"content-type": "text/plain"})

    return httpx.MockTransport(answer)


def scraper(
    pages: list[str | Exception | int], clock: Callable[[], float], **options: object
) -> MetricsScraper:
    client = httpx.AsyncClient(transport=transport(pages))
    return MetricsScraper("http://engine/metrics", client=client, clock=clock,
                          wall_clock=lambda: NOW, **options)  # type: ignore[arg-type]  # fmt: skip


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        # two engines: summed, KV the fullest; the pool from the info series' labels
        ("vllm", (5, 15, 0.57, 200_000.0, None, 21.0, 27_198 * 16.0)),
        # the retraction counter, not the gauge
        ("sglang", (4, 16, 0.73, 5e6, 812.5, 7.0, 413_852.0)),
        ("trtllm", (2, None, 0.31, None, None, None, None)),
        ("tgi", (6, 24, None, 45678.0, None, None, None)),
    ],
)
def test_each_engines_page(engine: str, expected: tuple[object, ...]) -> None:
    reading = read_page(page(engine), ENGINES[engine], now=NOW)
    got = (
        reading.waiting,
        reading.running,
        reading.kv_usage,
        reading.generated_tokens,
        reading.decode_tps,
        reading.preemptions,
        reading.kv_capacity,
    )
    assert got == expected


@pytest.mark.parametrize(
    "labels",
    ['block_size="16",engine="0"', 'block_size="16",num_gpu_blocks="many"',
     'block_size="0",num_gpu_blocks="27198"', 'block_size="16",num_gpu_blocks="-3"'],
)  # fmt: skip
def test_a_pool_info_series_without_two_counts_is_no_pool(labels: str) -> None:
    text = "\n".join(
        f"vllm:cache_config_info{{{labels}}} 1.0" if line.startswith("vllm:cache_config_info")
        else line
        for line in page("vllm").splitlines()
    )  # fmt: skip
    reading = read_page(text + "\n", VLLM, now=NOW)
    assert reading.kv_capacity is None
    assert reading.kv_usage == 0.57  # the rest of the page as before


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_the_engines_pool_reaches_the_policys_ledger() -> None:
    async with scraper([page("vllm")], clock=lambda: 5.0) as s:
        signals = await s()
    assert signals is not None
    assert signals.kv_capacity_tokens == 27_198 * 16
    one = Policy(PolicyConfig.from_dict({"kv": {"num_blocks": 40_000}}))
    one.observe(signals, now=5.0)
    assert one.kv.statistics().num_blocks == 27_198


def test_missing_metrics_are_unknown_not_zero() -> None:
    lines = [line for line in page("vllm").splitlines() if "kv_cache_usage" not in line]
    reading = read_page("\n".join(lines) + "\n", VLLM, now=NOW)
    assert reading.kv_usage is None
    assert reading.waiting == 5
    assert read_page(page("tgi"), VLLM, now=NOW).empty  # another engine's page


def test_the_older_vllm_kv_name_and_label_filters() -> None:
    older = page("vllm").replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    assert read_page(older, VLLM, now=NOW).kv_usage == 0.57
    one = read_page(page("vllm"), VLLM, labels={"engine": "0"}, now=NOW)
    assert (one.waiting, one.running, one.kv_usage) == (3, 8, 0.42)


def test_samples_with_old_timestamps_are_stale() -> None:
    stamp = int((NOW - 120) * 1000)  # exposition timestamps are milliseconds
    text = page("trtllm").replace(
        'trtllm_kv_cache_utilization{engine_type="trtllm",model_name="llama-3.1-70b"} 0.31',
        f'trtllm_kv_cache_utilization{{engine_type="trtllm",model_name="llama-3.1-70b"}} 0.31'
        f" {stamp}",
    )
    assert read_page(text, TRTLLM, now=NOW, max_sample_age=60).kv_usage is None
    assert read_page(text, TRTLLM, now=NOW, max_sample_age=300).kv_usage == 0.31


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_auto_detection_and_the_decode_rate() -> None:
    clock = ManualClock(100.0)
    later = page("vllm").replace("120000.0", "122000.0").replace("80000.0", "81000.0")
    reset = page("vllm").replace("120000.0", "10.0")
    pages: list[str | Exception | int] = [page("vllm"), later, reset, page("vllm")]
    async with scraper(pages, clock) as scrape:
        first = await scrape()
        clock.advance(2.0)
        second = await scrape()
        clock.advance(2.0)
        third = await scrape()  # the engine restarted: its counter went back
        clock.advance(2.0)
        fourth = await scrape()
    assert scrape.names is VLLM
    assert first is not None and second is not None and third is not None  # noqa: PT018
    assert (first.waiting, first.running, first.kv_usage) == (5, 15, 0.57)
    assert first.observed_at == 100.0
    assert first.decode_tps is None  # a rate needs two scrapes
    assert second.decode_tps == pytest.approx(3000 / 2.0)
    assert third.decode_tps is None
    assert fourth is not None
    assert fourth.decode_tps == pytest.approx((200_000 - 80_010) / 2.0)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_preemption_rate_is_the_counters_growth_per_second() -> None:
    clock = ManualClock(0.0)
    engine0 = '{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}'
    preempted = f"vllm:num_preemptions_total{engine0}"
    more = page("vllm").replace(f"{preempted} 12.0", f"{preempted} 18.0")
    gone = "\n".join(line for line in more.splitlines() if "num_preemptions" not in line) + "\n"
    pages: list[str | Exception | int] = [page("vllm"), more, more, gone, page("vllm")]
    rates = []
    async with scraper(pages, clock) as scrape:
        for _ in pages:
            signals = await scrape()
            assert signals is not None
            rates.append(signals.preemption_rate)
            clock.advance(4.0)
    # None until two scrapes; 6 more in 4 s; none more; the counter left the
    # page (unknown, and no rate across the gap); back, but from no reading.
    assert rates == [None, pytest.approx(1.5), 0.0, None, None]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("names", [SGLANG, TGI])
async def test_a_gauge_rate_stands_in_until_the_counter_has_two_points(names: object) -> None:
    clock = ManualClock(0.0)
    engine = "sglang" if names is SGLANG else "tgi"
    async with scraper([page(engine)], clock, engine=engine) as scrape:
        signals = await scrape()
    assert signals is not None
    assert signals.decode_tps == (812.5 if names is SGLANG else None)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_failed_scrapes_are_no_update(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(0.0)
    failures: list[str | Exception | int] = [
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        503,
        "this is { not a metrics page\n",
        page("tgi"),
    ]
    caplog.set_level(logging.DEBUG, "slopolicy.adapters.metrics")
    async with scraper(failures, clock, engine="tgi") as scrape:
        results = [await scrape() for _ in range(5)]
    assert results[:4] == [None, None, None, None]
    assert results[4] is not None
    assert scrape.failures == 4
    assert scrape.consecutive_failures == 0
    assert scrape.last_error is not None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per outage, not once per poll


@pytest.mark.parametrize(
    "options",
    [
        {"engine": "nope"},
        {"engine": object()},
        {"timeout": 0},
        {"timeout": float("nan")},
        {"timeout": "2"},
        {"max_sample_age": -1},
        {"max_page_bytes": 0},
        {"max_page_bytes": 1.5},
        {"url": "ftp://x/metrics"},
        {"url": "http:///metrics"},
        {"url": "::::"},
        {"url": None},
    ],
    ids=repr,
)
def test_bad_settings(options: dict[str, object]) -> None:
    from slopolicy.errors import UsageError

    url = options.pop("url", "http://x/metrics")
    with pytest.raises(UsageError):
        MetricsScraper(url, **options)  # type: ignore[arg-type]


_SIGNAL_NAMES = sorted({name for names in ENGINES.values() for name in names.names()})
_numbers = st.one_of(
    st.floats().map(repr),  # nan, inf, 1e+308, -0.0 ...
    st.integers(-(10**400), 10**400).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "0x10", "", "abc", "1_000"]),
)
_label_sets = st.sampled_from(["", '{engine="0"}', '{engine="1",model_name="m"}', '{le="+Inf"}'])
_stamps = st.one_of(st.just(""), st.integers(-(10**20), 10**20).map(lambda t: f" {t}"))
_sample_lines = st.builds(
    lambda name, labels, value, stamp: f"{name}{labels} {value}{stamp}",
    st.sampled_from(_SIGNAL_NAMES),
    _label_sets,
    _numbers,
    _stamps,
)
_pages = st.lists(
    st.one_of(
        _sample_lines,
        st.sampled_from(["# TYPE vllm:num_requests_waiting gauge", "# HELP x y", "#", "{}"]),
        st.text(max_size=40),
    ),
    max_size=12,
).map(lambda lines: "\n".join(lines) + "\n")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pages=st.lists(_pages, min_size=1, max_size=3), steps=st.lists(st.floats(0, 5)))
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_any_page_is_signals_or_no_update(pages: list[str], steps: list[float]) -> None:
    """Whatever the server sends, a scrape never raises: signals the gate
    accepts (finite, counts >= 0, KV within 0-1) or ``None``."""
    clock = ManualClock(0.0)
    async with scraper(list(pages), clock) as scrape:
        for index in range(len(pages)):
            signals = await scrape()
            if signals is not None:
                assert isinstance(signals, EngineSignals)  # validated when built
                assert signals.decode_tps is None or signals.decode_tps < float("inf")
            clock.advance(steps[index] if index < len(steps) else 1.0)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_values_beyond_a_float_are_unknown() -> None:
    huge = 'vllm:num_requests_waiting{engine="0"} 1.7e308\nvllm:num_requests_waiting 1.7e308\n'
    counter = "vllm:generation_tokens_total {}\nvllm:kv_cache_usage_perc 0.5\n"
    clock = ManualClock(0.0)
    pages: list[str | Exception | int] = [huge, counter.format(-1.7e308), counter.format(1.7e308)]
    async with scraper(pages, clock, engine="vllm") as scrape:
        assert await scrape() is None  # the waiting sum overflows: nothing known
        await scrape()
        clock.advance(1.0)
        jumped = await scrape()  # a rate too large for a float
    assert jumped is not None
    assert jumped.decode_tps is None
    assert jumped.kv_usage == 0.5


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_page_too_large_is_a_failed_scrape() -> None:
    clock = ManualClock(0.0)
    big = page("vllm") + "# padding\n" * 1000
    async with scraper([big, page("vllm")], clock, max_page_bytes=len(page("vllm"))) as scrape:
        assert await scrape() is None
        assert scrape.failures == 1
        assert scrape.last_error is not None
        assert "max_page_bytes" in scrape.last_error
        assert await scrape() is not None


@pytest.mark.anyio
async def test_a_page_that_trickles_in_fails_at_the_timeout(
    vllm_url: str, recorder: Recorder
) -> None:
    """``timeout`` bounds the whole scrape, not each read: a server sending
    its page a byte at a time cannot hold the poll (real sockets)."""
    recorder.metrics_page, recorder.metrics_delay = page("vllm"), 0.01
    try:
        async with MetricsScraper(f"{vllm_url}/metrics", timeout=0.3) as scrape:
            with anyio.fail_after(5):
                assert await scrape() is None
        assert scrape.last_error is not None
        assert scrape.last_error.startswith("TimeoutError")
    finally:
        recorder.metrics_delay = 0.0


@pytest.mark.anyio
async def test_the_gate_polls_a_real_metrics_page_and_sees_it_go_stale(
    vllm_url: str, recorder: Recorder
) -> None:
    """Over HTTP on 127.0.0.1, on asyncio and trio: the gate's signals are fresh
    while scrapes work, and unknown once they fail for longer than
    ``signal_max_age_s``."""
    recorder.metrics_page, recorder.metrics_status = page("vllm"), 200
    p = policy(ladder={"enabled": True, "signal_max_age_s": 0.3, "evaluate_every_s": 0.05})
    polled = anyio.Event()

    async with MetricsScraper(f"{vllm_url}/metrics", timeout=1.0) as scrape:

        async def source() -> EngineSignals | None:
            signals = await scrape()
            polled.set()  # the gate observes it before this task waits again
            return signals

        async with Gate(p, signals=source, poll_every=0.05):
            with anyio.fail_after(5):
                await polled.wait()
            await anyio.lowlevel.checkpoint()
            board = p.health.signals
            fresh = board.current(now=anyio.current_time())
            assert (fresh.waiting, fresh.running, fresh.kv_usage) == (5, 15, 0.57)
            recorder.metrics_status = 500
            await anyio.sleep(0.5)  # past signal_max_age_s, scrapes failing
            stale = board.current(now=anyio.current_time())
            assert (stale.waiting, stale.running, stale.kv_usage) == (None, None, None)
            assert scrape.consecutive_failures >= 1
    recorder.metrics_status = 200
