"""Plots of a comparison (needs the ``plot`` extra: ``pip install 'slopolicy[plot]'``).

:func:`plot_comparison` draws, in one PNG: the TTFT CDF of each lane under
each policy, and a timeline of the first lane's TTFT by arrival time under
each policy, with our overload states shaded behind it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slopolicy.errors import SimulationError
from slopolicy.sim.comparison import OURS, Comparison

__all__ = ("check_plot_path", "plot_comparison")

_SHADES = {"degraded": "#fff3c4", "batch_paused": "#ffd9a8", "interactive_only": "#ffb3b3"}


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: never open a window
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError("plots need matplotlib: pip install 'slopolicy[plot]'") from error
    return plt


def check_plot_path(path: str | Path) -> None:
    """Raise before any work if :func:`plot_comparison` could not write ``path``:
    :class:`ImportError` naming the extra without matplotlib,
    :class:`~slopolicy.errors.SimulationError` for a format matplotlib does not
    know (a path without a suffix is written as PNG)."""
    plt = _pyplot()
    suffix = Path(path).suffix.lower().lstrip(".")
    known = plt.figure().canvas.get_supported_filetypes()
    plt.close("all")
    if suffix and suffix not in known:
        formats = ", ".join(sorted(known))
        raise SimulationError(
            f"unknown image format {suffix!r}; use one of {formats}", source=str(path)
        )


def plot_comparison(comparison: Comparison, path: str | Path) -> None:
    """Write the CDFs and the timeline to ``path`` (PNG, or any format
    matplotlib knows by suffix)."""
    plt = _pyplot()
    lanes = list(next(iter(comparison.reports.values())).lanes)
    figure = plt.figure(figsize=(5 * max(len(lanes), 2), 9), constrained_layout=True)
    grid = figure.add_gridspec(2, len(lanes))
    for column, lane in enumerate(lanes):
        _cdf(figure.add_subplot(grid[0, column]), comparison, lane)
    _timeline(figure.add_subplot(grid[1, :]), comparison, lanes[0])
    figure.suptitle(f"{comparison.workload.name} on {comparison.engine.profile.name}")
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _cdf(axes: Any, comparison: Comparison, lane: str) -> None:
    for name, result in comparison.results.items():
        values = sorted(t for r in result.records if r.lane == lane and (t := r.ttft) is not None)
        if not values:
            continue
        fractions = [(i + 1) / len(values) for i in range(len(values))]
        axes.step(values, fractions, where="post", label=name)
    target = comparison.reports[next(iter(comparison.reports))].lanes[lane].targets.ttft_target
    if target is not None:
        axes.axvline(target, color="grey", linestyle="--", linewidth=1, label="TTFT target")
    axes.set_xscale("log")
    axes.set_xlabel("TTFT (s)")
    axes.set_ylabel("fraction of requests")
    axes.set_title(f"TTFT CDF, lane {lane!r}")
    axes.legend(fontsize="small")


def _timeline(axes: Any, comparison: Comparison, lane: str) -> None:
    ours = comparison.reports.get(OURS)
    moves = [] if ours is None or ours.fallback is None else list(ours.fallback.timeline)
    if moves:
        ends = [m[0] for m in moves[1:]] + [max(ours.end_s if ours else 0.0, moves[-1][0])]
        for (start, _, _, state), end in zip(moves, ends, strict=True):
            if state in _SHADES:
                axes.axvspan(start, end, color=_SHADES[state], zorder=0)
    for name, result in reversed(list(comparison.results.items())):  # ours on top
        points = [(r.request.arrival, r.ttft) for r in result.records if r.lane == lane and r.ttft]
        if points:
            axes.scatter([p[0] for p in points], [p[1] for p in points], s=3, label=name)
    axes.set_yscale("log")
    axes.set_xlabel("arrival (s)")
    axes.set_ylabel("TTFT (s)")
    axes.set_title(f"TTFT over time, lane {lane!r} (shaded: our overload states)")
    axes.legend(fontsize="small", markerscale=3)
