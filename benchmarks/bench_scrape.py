"""Event-loop stall of a metrics scrape: ``python -m benchmarks.bench_scrape``.

A 1 ms ticker runs beside :class:`~slopolicy.adapters.metrics.MetricsScraper`
scraping vLLM-style pages of growing size (one ``vllm:generation_tokens_total``
series per line, the page served at once by an in-process transport, 10 ms
between scrapes so that each one's stall is measured alone). The worst gap between
ticks, less the 1 ms the ticker sleeps, is the longest the loop was held.

**Measured** on the development container (2 vCPUs, Python 3.11.7, a load
average near 7 from other work, so even the ticker alone sees 20 ms gaps):
parsed on the loop (before), a 1.34 MB page held it 1,327 ms; parsed in a
worker thread (now), the worst gap was 74-156 ms over two runs, the GIL going
back and forth with the parsing thread::

     page MB  ms per scrape  worst stall ms     (before: worst stall ms)
        0.06           49.0            19.2                         31.3
        0.33          379.3            76.2                        166.8
        1.34          874.3            73.8                       1326.7
"""

from __future__ import annotations

import time

import anyio
import httpx

from slopolicy.adapters.metrics import MetricsScraper

__all__ = ("main", "worst_stall")

LINES = (1_000, 5_000, 20_000)
SCRAPES = 3


def _page(lines: int) -> str:
    series = (
        f'vllm:generation_tokens_total{{engine="{i}",model_name="m"}} {i}.0' for i in range(lines)
    )
    return "\n".join(series) + "\nvllm:num_requests_waiting 3\n"


async def worst_stall(page: str) -> tuple[float, float]:
    """(worst loop stall, seconds per scrape) over :data:`SCRAPES` scrapes of ``page``."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=page))
    worst = 0.0
    done = False

    async def tick() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not done:
            await anyio.sleep(0.001)
            now = time.perf_counter()
            worst, last = max(worst, now - last - 0.001), now

    async with httpx.AsyncClient(transport=transport) as client, anyio.create_task_group() as group:
        scraper = MetricsScraper("http://engine/metrics", client=client, engine="vllm", timeout=60)
        group.start_soon(tick)
        await anyio.sleep(0.05)
        took = 0.0
        for _ in range(SCRAPES):
            scraped = time.perf_counter()
            assert await scraper() is not None
            took += time.perf_counter() - scraped
            await anyio.sleep(0.01)  # the ticker runs between scrapes: stalls stay apart
        done = True
    return worst, took / SCRAPES


def main() -> None:
    print(f"{'page MB':>8}  {'ms per scrape':>13}  {'worst stall ms':>14}")
    for lines in LINES:
        page = _page(lines)
        worst, took = anyio.run(worst_stall, page)
        print(f"{len(page) / 1e6:8.2f}  {took * 1e3:13.1f}  {worst * 1e3:14.1f}")


if __name__ == "__main__":
    main()
