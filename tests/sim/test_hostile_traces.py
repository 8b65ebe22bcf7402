"""Hostile trace files: every one is a TraceError naming the file, line and
column, or a valid workload; nothing else ever leaves the reader."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slopolicy.errors import SimulationError, TraceError
from slopolicy.sim import Workload, read_trace, read_traces

COLUMNS = ("arrival", "prompt_tokens", "output_tokens", "tenant", "lane", "max_new_tokens")


def _read(name: str, content: bytes) -> Workload | TraceError:
    """The workload in a file holding ``content``, or the TraceError it raised
    (anything else escapes and fails the test)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(content)
        try:
            return read_trace(path)
        except TraceError as error:
            caught = error
    assert caught.source == str(path)
    assert caught.line is None or 1 <= caught.line <= len(content.splitlines()) + 1
    assert len(str(caught)) < 400 + len(str(path))  # values are quoted clipped
    return caught


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**450), max_value=10**450)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=300)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
_rows = st.fixed_dictionaries(
    {"arrival": _values, "prompt_tokens": _values, "output_tokens": _values},
    optional=dict.fromkeys(("tenant", "lane", "max_new_tokens"), _values),
) | st.dictionaries(st.sampled_from(COLUMNS) | st.text(max_size=8), _values, max_size=7)
# Lines no JSON encoder writes: nesting past the recursion limit, integers past
# Python's digit limit, bare values.
_raw_lines = st.sampled_from(
    [
        "[" * 5000 + "]" * 5000,
        '{"arrival": 0, "prompt_tokens": ' + "1" * 4500 + ', "output_tokens": 1}',
        '{"arrival": ' + "9" * 400 + ', "prompt_tokens": 1, "output_tokens": 1}',
        "NaN",
        '{"arrival": 0, "prompt_tokens": 1, "output_tokens": 1, "tenant": "' + "t" * 300 + '"}',
    ]
)


@settings(max_examples=150)
@given(content=st.binary(max_size=600), name=st.sampled_from(["t.csv", "t.jsonl"]))
def test_arbitrary_bytes_give_a_workload_or_a_trace_error(content: bytes, name: str) -> None:
    _read(name, content)


@settings(max_examples=150)
@given(
    lines=st.lists(
        st.text(alphabet=st.characters(codec="utf-8"), max_size=80)
        | st.sampled_from(
            [
                "0,1,1",
                '"a,b',
                "1e999,2,3",
                "9" * 500 + ",1,1",
                "\x00",
                "0,1,1,1,1",
                "0,1,1," + "t" * 300,
                "0,1,1," + "f" * 140_000,
                "1e12,1,1",
            ]
        ),
        max_size=6,
    ),
    header=st.sampled_from(
        ["arrival,prompt_tokens,output_tokens", "arrival,prompt_tokens,output_tokens,tenant"]
    ),
)
def test_arbitrary_csv_lines_give_a_workload_or_a_trace_error(
    lines: list[str], header: str
) -> None:
    _read("t.csv", "\n".join([header, *lines]).encode())


@settings(max_examples=200)
@given(rows=st.lists(_rows.map(json.dumps) | _raw_lines, min_size=1, max_size=5))
def test_hostile_json_rows_give_a_workload_or_a_trace_error(rows: list[str]) -> None:
    text = "\n".join(rows)  # json.dumps writes NaN and Infinity too
    result = _read("t.jsonl", text.encode())
    if isinstance(result, Workload):  # what was accepted is what the policy can run
        assert all(r.to_request() for r in result.requests)


@settings(max_examples=100)
@given(
    rows=st.lists(
        st.fixed_dictionaries(
            {
                "arrival": st.floats(0, 1e6) | st.integers(0, 10**6),
                "prompt_tokens": st.integers(0, 10**6),
                "output_tokens": st.integers(0, 10**6),
            },
            optional={"tenant": st.text(min_size=1, max_size=20)},
        ),
        min_size=1,
        max_size=8,
    )
)
def test_valid_rows_always_replay(rows: list[dict[str, Any]]) -> None:
    result = _read("t.jsonl", "\n".join(json.dumps(row) for row in rows).encode())
    assert isinstance(result, Workload), result
    assert len(result) == len(rows)


_FOUR_HUNDRED_DIGITS = "9" * 400
_CASES: list[tuple[str, str | bytes, int, str | None, str]] = [
    # name, content, line, column, message
    ("deep.jsonl", "[" * 100_000 + "]" * 100_000 + "\n", 1, None, "nested too deeply"),
    (
        "digits.jsonl",
        '{"arrival": 0, "prompt_tokens": ' + "1" * 5000 + ', "output_tokens": 1}\n',
        1,
        None,
        "4300 digits",
    ),
    (
        "bytes.jsonl",
        b'{"arrival": 0, "prompt_tokens": 1, "output_tokens": 1}\n{"tenant": "\xff"}\n',
        2,
        None,
        "not UTF-8",
    ),
    (
        "arrival.jsonl",
        '{"arrival": 0, "prompt_tokens": 1, "output_tokens": 1}\n'
        f'{{"arrival": {_FOUR_HUNDRED_DIGITS}, "prompt_tokens": 1, "output_tokens": 1}}\n',
        2,
        "arrival",
        "finite number",
    ),
    (
        "arrival.csv",
        f"arrival,prompt_tokens,output_tokens\n0,1,1\n{_FOUR_HUNDRED_DIGITS},1,1\n",
        3,
        "arrival",
        "finite number",
    ),
    (
        "span.csv",
        "arrival,prompt_tokens,output_tokens\n0,1,1\n1e12,1,1\n",
        3,
        None,
        "arrival must be within",
    ),
    (
        "field.csv",
        "arrival,prompt_tokens,output_tokens,tenant\n0,1,1," + "a" * 200_000 + "\n",
        2,
        None,
        "field larger than field limit",
    ),
    (
        "tenant.jsonl",
        '{"arrival": 0, "prompt_tokens": 1, "output_tokens": 1, "tenant": "' + "t" * 300 + '"}\n',
        1,
        None,
        "tenant: longer than 256",
    ),
    (
        "count.csv",
        "arrival,prompt_tokens,output_tokens\n0," + "7" * 5000 + ",1\n",
        2,
        "prompt_tokens",
        "expected a token count",
    ),
    (
        "huge.jsonl",
        '{"arrival": 0, "prompt_tokens": ' + "1" * 400 + ', "output_tokens": 1}\n',
        1,
        "prompt_tokens",
        "within [0, 1,000,000,000]",
    ),
    ("line.jsonl", "x" * (2 << 20), 1, None, "longer than 1,048,576 bytes"),
    ("extra.csv", "arrival,prompt_tokens,output_tokens\n0,1,1,9\n", 2, None, "more fields"),
    (
        "kind.jsonl",
        '{"arrival": 0, "prompt_tokens": [1], "output_tokens": 1}\n',
        1,
        "prompt_tokens",
        "got list",
    ),
    (
        "who.jsonl",
        '{"arrival": 0, "prompt_tokens": 1, "output_tokens": 1, "tenant": {"a": 1}}\n',
        1,
        "tenant",
        "expected text, got dict",
    ),
]


def _write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize(("name", "content", "line", "column", "message"), _CASES)
def test_each_hostile_trace_names_its_file_line_and_column(
    tmp_path: Path,
    name: str,
    content: str | bytes,
    line: int,
    column: str | None,
    message: str,
) -> None:
    path = _write(tmp_path / name, content)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    error = caught.value
    assert (error.source, error.line, error.column) == (str(path), line, column)
    assert message in str(error)
    assert str(error).startswith(f"{path}:{line}: ")
    assert len(str(error)) < 200 + len(str(path))


def test_the_cli_prints_one_line_for_each_hostile_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from slopolicy.cli import main

    for name, content, line, _, message in _CASES:
        path = _write(tmp_path / name, content)
        assert main(["simulate", "--trace", str(path), "--compare", "", "--no-progress"]) == 1
        captured = capsys.readouterr()
        assert captured.err.startswith(f"{path}:{line}: "), captured.err
        assert message in captured.err
        assert captured.err.count("\n") == 1
        assert not captured.out


def test_a_lone_carriage_return_ends_a_line_as_in_text_mode(tmp_path: Path) -> None:
    path = tmp_path / "mac.csv"
    path.write_bytes(b"\xef\xbb\xbfarrival,prompt_tokens,output_tokens\r0,1,1\r\n1,x,1\r")
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert (caught.value.line, caught.value.column) == (3, "prompt_tokens")


def test_a_stream_name_too_long_for_request_ids_is_refused(tmp_path: Path) -> None:
    path = tmp_path / ("s" * 220 + ".csv")
    path.write_text("arrival,prompt_tokens,output_tokens\n0,1,1\n")
    with pytest.raises(TraceError, match="1 to 200 characters"):
        read_traces([path])


@pytest.mark.parametrize(
    "options",
    [
        {"max_new_tokens": 0},
        {"max_new_tokens": 10**12},
        {"retries": -1},
        {"rate_scale": float("nan")},
        {"rate_scale": float("inf")},
    ],
)
def test_bad_reader_arguments_are_simulation_errors_before_any_read(
    options: dict[str, Any],
) -> None:
    with pytest.raises(SimulationError) as caught:
        read_trace("does-not-exist.csv", **options)
    assert not isinstance(caught.value, TraceError)
