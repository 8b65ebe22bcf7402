"""The workloads ``bench_capacity`` judges policies on, each built deterministically.

- ``azure``: the Azure LLM inference traces 2023, code and conversation merged
  on one timeline (the copy shipped in ``slopolicy/sim/data/azure_llm_2023``;
  CC-BY-4.0, Patel et al., "Splitwise", ISCA 2024), a window of it.
- ``servegen``: a multi-tenant trace generated from ServeGen's per-client
  descriptors of a DeepSeek-R1 service (``benchmarks/data/servegen_deepseek_r1``;
  Apache-2.0, "ServeGen", NSDI 2026): for every client's 10-minute window,
  Gamma inter-arrivals with that window's rate and CV, lengths log-normal on
  the client's p50 and p90, capped at its max; the client is the tenant and
  its largest answer its ``max_new_tokens``.
- ``multi-tenant``: 35 tenants, one sending half the traffic, the others a
  Zipf share of the rest; bursty (Gamma, CV 2) chat-sized requests.
- ``long-context``: chat beside a conversation whose prompts run to tens of
  thousands of tokens (median 16k).
- ``long-conversation``: one conversation stream of 24 users (Zipf-skewed),
  prompts median 9k tokens up to 120k (log-normal spread 1.0): FCFS at 74%
  of the limit, its misses the chat turns that land behind a long prefill.
- ``long-conversation-narrow``: the same stream with the prompts' spread
  narrowed to 0.6: fewer giant prompts, so the trace is throughput-bound
  (FCFS at 79% of the limit, the engine saturated at twice FCFS's capacity),
  nearer issue 18's long-context trace (FCFS at 98% of its limit), and the
  question is who keeps their SLO past the knee.

Lane hints are dropped (every request routes by its size under the policy
judged), since the default policy has no ``code`` lane.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path

from slopolicy.sim import (
    GammaArrivals,
    LogNormal,
    Poisson,
    Stream,
    Tenants,
    Workload,
    azure_2023,
    build_workload,
)

__all__ = (
    "SERVEGEN",
    "azure",
    "long_context",
    "long_conversation",
    "multi_tenant",
    "servegen",
    "without_hints",
)

#: The ServeGen DeepSeek-R1 descriptors shipped beside the benchmarks.
SERVEGEN = Path(__file__).parent / "data" / "servegen_deepseek_r1"
_WINDOW_S = 600.0  # ServeGen's rate windows
_Z90 = 1.2815515655446004  # the standard normal's 0.9 quantile


def without_hints(workload: Workload) -> Workload:
    """``workload`` with every lane hint dropped."""
    return dataclasses.replace(
        workload, requests=tuple(dataclasses.replace(r, lane=None) for r in workload)
    )


def azure(start_s: float = 1200.0, duration_s: float = 600.0) -> Workload:
    """The merged Azure 2023 traces from ``start_s`` for ``duration_s`` seconds."""
    window = azure_2023().window(start_s, start_s + duration_s)
    return dataclasses.replace(without_hints(window), name="azure-2023 merged")


def _rows(path: Path) -> Iterator[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        yield from csv.DictReader(handle)


def _fitted(p50: str, p90: str, top: str) -> LogNormal:
    median = max(1.0, float(p50))
    sigma = max(0.0, math.log(max(float(p90), median) / median) / _Z90)
    return LogNormal(median, sigma, 1, max(1, round(float(top))))


def servegen(
    start_s: float = 0.0, duration_s: float = 300.0, *, seed: int = 0, folder: Path = SERVEGEN
) -> Workload:
    """A trace from ServeGen's per-client descriptors over ``[start_s,
    start_s + duration_s)`` seconds of day 0 (see the module doc)."""
    lengths: dict[str, list[tuple[float, dict[str, str]]]] = {}
    for row in _rows(folder / "servegen_deepseek-r1_client_lengths_day0.csv"):
        lengths.setdefault(row["client_id"], []).append((float(row["window_start_s"]), row))
    streams = []
    end_s = start_s + duration_s
    for row in _rows(folder / "servegen_deepseek-r1_client_windows_day0.csv"):
        begin, rate, client = float(row["timestamp_s"]), float(row["rate_rps"]), row["client_id"]
        if rate <= 0 or begin + _WINDOW_S <= start_s or begin >= end_s or client not in lengths:
            continue
        known = sorted(lengths[client], key=lambda entry: entry[0])
        shape = next((r for at, r in reversed(known) if at <= begin), known[0][1])
        output = _fitted(shape["out_p50"], shape["out_p90"], shape["out_max"])
        cv = float(row["cv"])
        streams.append(
            Stream(
                f"c{client}-{int(begin)}",
                GammaArrivals(rate, cv) if cv > 0 else Poisson(rate),
                _fitted(shape["in_p50"], shape["in_p90"], shape["in_max"]),
                output,
                Tenants((f"client-{client}",)),
                max_new_tokens=output.high,
                start=max(begin, start_s) - start_s,
                end=min(begin + _WINDOW_S, end_s) - start_s,
            )
        )
    return build_workload(streams, duration=duration_s, seed=seed, name="servegen deepseek-r1")


def multi_tenant(duration_s: float = 300.0, *, seed: int = 18) -> Workload:
    """35 tenants, one of them dominant, bursty chat-sized traffic at 8 requests/s."""
    others = [1.0 / (i + 1) for i in range(34)]
    weights = (sum(others), *others)  # the dominant tenant sends half
    names = ("dominant", *(f"tenant-{i:02d}" for i in range(34)))
    chat = Stream(
        "requests",
        GammaArrivals(8.0, 2.0),
        LogNormal(1000, 1.0, 16, 16_000),
        LogNormal(200, 0.8, 8, 1024),
        Tenants(names, weights=weights),
        max_new_tokens=1024,
    )
    return build_workload([chat], duration=duration_s, seed=seed, name="multi-tenant")


def long_context(duration_s: float = 300.0, *, seed: int = 18) -> Workload:
    """Chat (3 requests/s, 12 tenants) beside long-context conversation (1 request/s,
    prompts median 16k tokens, 2k-100k, 6 tenants)."""
    chat = Stream(
        "chat",
        Poisson(3.0),
        LogNormal(600, 0.8, 16, 6000),
        LogNormal(180, 0.6, 8, 1024),
        Tenants.numbered("chat-", 12, skew=0.8),
        max_new_tokens=1024,
    )
    long = Stream(
        "long",
        Poisson(1.0),
        LogNormal(16_000, 0.7, 2000, 100_000),
        LogNormal(300, 0.6, 16, 2048),
        Tenants.numbered("long-", 6, skew=0.5),
        max_new_tokens=2048,
    )
    return build_workload([chat, long], duration=duration_s, seed=seed, name="long-context")


def long_conversation(duration_s: float = 300.0, *, seed: int = 7, spread: float = 1.0) -> Workload:
    """One long-context conversation stream (2 requests/s, 24 users, Zipf
    skew 1.1): prompts median 9k tokens, 300 to 120k, log-normal with sigma
    ``spread``; answers median 250."""
    conversation = Stream(
        "conversation",
        Poisson(2.0),
        LogNormal(9000, spread, 300, 120_000),
        LogNormal(250, 0.7, 8, 2048),
        Tenants.numbered("user-", 24, skew=1.1),
        max_new_tokens=2048,
    )
    return build_workload([conversation], duration=duration_s, seed=seed, name="long-conversation")
