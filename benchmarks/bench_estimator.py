"""Cost estimation and routing: time per request, and the bounded estimator's accuracy.

Run from the repository root::

    python -m benchmarks.bench_estimator [--quick]

Prints two tables. Times are medians over repeats (this machine is noisy, so
compare ratios); errors are over several slices of each corpus, because a
sampled estimate's error depends on where the windows fall.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

from benchmarks.corpora import CORPORA, slice_tokens
from slopolicy import PolicyConfig, Request
from slopolicy.core.cost.estimator import CostEstimator
from slopolicy.core.cost.tokens import TiktokenCounter

_CHAT = "Can you summarise the attached meeting notes in three bullet points?"


def _median_seconds(call: Callable[[], object], repeats: int, inner: int = 1) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            call()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def _routing_table(repeats: int) -> list[str]:
    config = PolicyConfig()
    counter = TiktokenCounter()
    router = config.build_router(config.build_estimator(counter))
    text = Request(tenant="acme", prompt=_CHAT, max_new_tokens=256)
    messages = Request(
        tenant="acme",
        messages=(  # type: ignore[arg-type]  # OpenAI-style dicts are accepted
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": _CHAT},
        ),
        max_new_tokens=256,
    )
    given = Request(tenant="acme", prompt_tokens=15, max_new_tokens=256)
    rows = [
        ("prompt tokens given", given),
        ("short text prompt", text),
        ("short chat (2 messages)", messages),
    ]
    lines = [
        "Estimate + route, one request (median of repeats)",
        f"{'request':<28}{'us/request':>12}",
    ]
    for label, request in rows:
        seconds = _median_seconds(functools.partial(router.route, request), repeats, inner=2000)
        lines.append(f"{label:<28}{seconds * 1e6:>12.2f}")
    return lines


def _estimator_table(sizes: list[int], slices: int, repeats: int) -> list[str]:
    counter = TiktokenCounter()
    estimator = CostEstimator(counter=counter)
    lines = [
        "Prompt token count: exact tiktoken vs the bounded estimate",
        f"(errors over {slices} slices per cell; times are medians)",
        f"{'corpus':<7}{'tokens':>9}{'exact ms':>10}{'estimate ms':>13}{'speedup':>9}"
        f"{'err p50':>9}{'err p90':>9}{'err max':>9}{'mean se':>9}",
    ]
    for name in CORPORA:
        for size in sizes:
            exact_times, estimate_times, errors, stderrs = [], [], [], []
            for index in range(slices):
                text = slice_tokens(name, size, counter.count, start=0.05 + 0.8 * index / slices)
                exact = counter.count(text)
                exact_times.append(_median_seconds(functools.partial(counter.count, text), repeats))
                estimate_times.append(
                    _median_seconds(functools.partial(estimator.count_texts, [text]), repeats)
                )
                estimate = estimator.count_texts([text])
                errors.append(abs(estimate.tokens - exact) / exact)
                stderrs.append(estimate.rel_stderr)
            errors.sort()
            exact_ms = statistics.median(exact_times) * 1e3
            estimate_ms = statistics.median(estimate_times) * 1e3
            lines.append(
                f"{name:<7}{size:>9,}{exact_ms:>10.3f}{estimate_ms:>13.3f}"
                f"{exact_ms / estimate_ms:>8.1f}x"
                f"{errors[len(errors) // 2]:>9.2%}{errors[int(0.9 * (len(errors) - 1))]:>9.2%}"
                f"{errors[-1]:>9.2%}{statistics.mean(stderrs):>9.2%}"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer slices and repeats")
    args = parser.parse_args(argv)
    slices, repeats = (4, 3) if args.quick else (20, 5)
    print("\n".join(_routing_table(repeats=5 if args.quick else 15)))
    print()
    print("\n".join(_estimator_table([200, 5_000, 50_000, 500_000], slices, repeats)))


if __name__ == "__main__":
    main()
