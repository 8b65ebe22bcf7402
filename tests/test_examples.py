"""Every runnable example in examples/ runs, from a clean interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[1] / "examples"
# Served by an ASGI server, run against an engine, or needing a Redis:
# tests/runtime/test_gateway_example.py, tests/adapters/test_examples.py and
# tests/backends/test_scale_out_example.py drive them.
ELSEWHERE = {
    "gateway_starlette.py",
    "openai_wrapper.py",
    "tgi_wrapper.py",
    "vllm_inprocess.py",
    "scale_out.py",
}
SCRIPTS = sorted(
    path
    for path in EXAMPLES.glob("*.py")
    if path.name not in ELSEWHERE and "__main__" in path.read_text(encoding="utf-8")
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
