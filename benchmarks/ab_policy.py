"""The Policy lifecycle of this tree against another revision, runs alternating.

Run from the repository root (a git checkout)::

    python -m benchmarks.ab_policy REV [--rounds 7] [--steps 20000]

Exports ``REV`` (``git archive``) to a temporary folder and runs
``benchmarks.bench_policy``'s loop (submit + dispatch + finish, 1,000 queued,
1 / 1,000 / 100,000 tenants) in a fresh interpreter per run, alternating the
two trees, so both see the same machine: this container's speed drifts by
tens of percent over minutes. Prints every run and the medians, with the
ratio of the medians.
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

_TENANTS = (1, 1_000, 100_000)
_PROBE = (
    "from benchmarks.bench_policy import _run\n"
    "print(' '.join(repr(_run(t, {steps}) * 1e6) for t in {tenants}))\n"
)


def _export(revision: str, into: Path) -> None:
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+
            tar.extractall(into, filter="data")
        else:  # pragma: no cover - older patch releases
            tar.extractall(into)  # our own repository's archive


def _measure(tree: Path, steps: int) -> list[float]:
    code = _PROBE.format(steps=steps, tenants=_TENANTS)
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": ""},
    ).stdout
    return [float(field) for field in out.split()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision", help="the revision to compare against, e.g. HEAD~3")
    parser.add_argument("--rounds", type=int, default=7, help="runs of each tree")
    parser.add_argument("--steps", type=int, default=20_000, help="requests per run")
    args = parser.parse_args(argv)
    here = Path.cwd()
    runs: dict[str, list[list[float]]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as folder:
        old = Path(folder)
        _export(args.revision, old)
        print(f"us/request at {', '.join(f'{t:,}' for t in _TENANTS)} tenants")
        for _ in range(args.rounds):
            for name, tree in (("old", old), ("new", here)):
                result = _measure(tree, args.steps)
                runs[name].append(result)
                print(f"{name:>4}  " + "  ".join(f"{value:8.1f}" for value in result))
    medians = {
        name: [statistics.median(column) for column in zip(*rows, strict=True)]
        for name, rows in runs.items()
    }
    print("\nmedians" + "".join(f"{t:>12,}" for t in _TENANTS))
    for name in ("old", "new"):
        print(f"{name:<7}" + "".join(f"{value:12.1f}" for value in medians[name]))
    ratios = [o / n for o, n in zip(medians["old"], medians["new"], strict=True)]
    print("old/new" + "".join(f"{ratio:11.2f}x" for ratio in ratios))


if __name__ == "__main__":
    main()
