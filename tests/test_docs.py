"""The docs pages include real files, and every example a page includes runs in the tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_examples import SCRIPTS

ROOT = Path(__file__).parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
# A line that looks like a snippet include: mangled ones (a code formatter
# once turned --8<-- into --8 < --) render as text instead of the file.
SNIPPET_LIKE = re.compile(r"^\s*-+\s*8\s*<")
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::[\w-]+)?"$')  # a file, or a section of one


def _snippet_lines() -> list[tuple[Path, str]]:
    return [
        (page, line)
        for page in PAGES
        for line in page.read_text(encoding="utf-8").splitlines()
        if SNIPPET_LIKE.match(line)
    ]


@pytest.mark.parametrize(("page", "line"), _snippet_lines(), ids=lambda v: str(v))
def test_snippet_lines_name_existing_files(page: Path, line: str) -> None:
    match = SNIPPET.match(line)
    assert match, f"{page.name}: malformed snippet line {line!r}"
    assert (ROOT / match.group(1)).is_file(), f"{page.name}: {match.group(1)} does not exist"


def test_every_included_example_is_run_by_the_tests() -> None:
    included = {
        match.group(1)
        for _, line in _snippet_lines()
        if (match := SNIPPET.match(line)) and match.group(1).endswith(".py")
    }
    # Where an example is named does not count: this file and the list of
    # examples run as scripts (SCRIPTS) name them without running them.
    listing = {Path(__file__), ROOT / "tests" / "test_examples.py"}
    tests = "\n".join(
        path.read_text(encoding="utf-8")
        for path in (ROOT / "tests").rglob("*.py")
        if path not in listing
    )
    for name in sorted(included):
        script = ROOT / name
        runs_as_script = script in SCRIPTS
        tested = script.name in tests or f"examples.{script.stem} import" in tests
        assert runs_as_script or tested, f"{name} is in the docs but no test runs it"
