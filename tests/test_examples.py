"""Every runnable example in examples/ runs, from a clean interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[1] / "examples"
# Served by an ASGI server (tests/runtime/test_gateway_example.py drives it), or
# needing a Redis (tests/backends/test_scale_out_example.py runs it with one).
SERVED = {"gateway_starlette.py", "scale_out.py"}
SCRIPTS = sorted(
    path
    for path in EXAMPLES.glob("*.py")
    if path.name not in SERVED and "__main__" in path.read_text(encoding="utf-8")
)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_the_example_runs(script: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=EXAMPLES.parent,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
