"""examples/scale_out.py (included in docs/scale-out.md) runs against the tests' Redis."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_scale_out_example_shares_the_burst_across_replicas(redis_url: str) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "scale_out.py"), redis_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    admitted = [int(line.split(": ")[1].split()[0]) for line in lines[:3]]
    assert sum(admitted) == 5, result.stdout
    assert lines[3].startswith("acme across 3 replicas: 5 admitted"), result.stdout
