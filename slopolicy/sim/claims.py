"""The claims a comparison is meant to show, checked against its own numbers.

:func:`seed_claims` are the demo's: FCFS misses the interactive p95 TTFT
target by at least 3x, ours keeps interactive p99 TTFT within its target
and attainment at or above 99%, our goodput is at least every baseline's, and
no lane starves under ours. :func:`overload_claims` are the trace replay's:
FCFS attains under 50%, ours keeps the protected lane above 90%, and our
goodput is at least 1.5x FCFS's and above every baseline's. The CLI prints
them and the tests assert them on shortened runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from slopolicy.sim.comparison import OURS, Comparison
from slopolicy.sim.reports import PolicyReport

__all__ = ("Claim", "overload_claims", "seed_claims")


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim, whether it ``holds``, and the numbers behind it."""

    holds: bool
    text: str


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g} s"


def _ours(comparison: Comparison) -> tuple[PolicyReport, dict[str, PolicyReport]]:
    reports = dict(comparison.reports)
    ours = reports.pop(OURS)
    return ours, reports


def _goodput_claims(ours: PolicyReport, others: dict[str, PolicyReport]) -> list[Claim]:
    if not others:
        return []
    best = max(others.values(), key=lambda r: r.goodput_rps)
    return [
        Claim(
            ours.goodput_rps >= best.goodput_rps,
            f"our goodput {ours.goodput_rps:.2f} req/s >= every baseline's "
            f"(best: {best.name} {best.goodput_rps:.2f} req/s)",
        )
    ]


def seed_claims(comparison: Comparison, lane: str = "interactive") -> tuple[Claim, ...]:
    """The demo's claims for ``lane`` (needs ours; FCFS where it is run)."""
    ours, others = _ours(comparison)
    mine = ours.lanes[lane]
    targets = mine.targets
    claims: list[Claim] = []
    fcfs = others.get("fcfs")
    if fcfs is not None and targets.ttft_p95 is not None:
        p95 = fcfs.lanes[lane].ttft_p95_s
        ratio = None if p95 is None else p95 / targets.ttft_p95
        claims.append(
            Claim(
                ratio is not None and ratio >= 3,
                f"FCFS {lane} p95 TTFT {_s(p95)} is "
                f"{'n/a' if ratio is None else f'{ratio:.1f}x'} its {_s(targets.ttft_p95)} target "
                "(claim: >= 3x)",
            )
        )
    bound = targets.ttft_p99 if targets.ttft_p99 is not None else targets.ttft_p95
    claims.append(
        Claim(
            mine.ttft_p99_s is not None and bound is not None and mine.ttft_p99_s <= bound,
            f"our {lane} p99 TTFT {_s(mine.ttft_p99_s)} is within its {_s(bound)} target",
        )
    )
    claims.append(
        Claim(
            (mine.attainment or 0.0) >= 0.99,
            f"our {lane} attainment {_pct(mine.attainment)} (claim: >= 99%)",
        )
    )
    claims.extend(_goodput_claims(ours, others))
    for name, other in ours.lanes.items():
        if name == lane:
            continue
        done = other.completed / other.offered if other.offered else 1.0
        claims.append(
            Claim(
                other.unfinished == 0 and done >= 0.99,
                f"{name}: {other.completed}/{other.offered} completed under ours, "
                f"drained {_s(other.drain_s)} after its last arrival (claim: >= 99%, none left)",
            )
        )
    return tuple(claims)


def overload_claims(comparison: Comparison, lane: str = "interactive") -> tuple[Claim, ...]:
    """The trace replay's claims for the protected ``lane`` (needs ours and FCFS)."""
    ours, others = _ours(comparison)
    fcfs = others["fcfs"]
    mine = ours.lanes[lane].attainment
    ratio = ours.goodput_rps / fcfs.goodput_rps if fcfs.goodput_rps else float("inf")
    claims = [
        Claim(
            (fcfs.attainment or 0.0) < 0.5,
            f"FCFS attainment {_pct(fcfs.attainment)} (claim: < 50%)",
        ),
        Claim((mine or 0.0) > 0.9, f"our {lane} attainment {_pct(mine)} (claim: > 90%)"),
        Claim(ratio >= 1.5, f"our goodput is {ratio:.2f}x FCFS's (claim: >= 1.5x)"),
    ]
    claims.extend(_goodput_claims(ours, others))
    return tuple(claims)
