"""Reading a trace file's rows: CSV or JSONL, strict UTF-8, bounded lines.

:func:`read_rows` yields each row with its line number, so every problem,
here or in :mod:`slopolicy.sim.traces`, names the file and the line. A line
(a CSV record's physical line) may hold at most 1 MiB: one bad line then
costs bounded memory and parse time, and JSON nested too deeply, an integer
past Python's digit limit, bytes that are not UTF-8 or a CSV field over
``csv.field_size_limit()`` are each a :class:`~slopolicy.errors.TraceError`.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from slopolicy.errors import TraceError

__all__ = ("read_rows",)

# Longest line read, in bytes: far above any real row, and a bound on what one
# bad line costs in memory and parse time.
_MAX_LINE = 1 << 20


def read_rows(path: Path) -> Iterator[tuple[int, Mapping[str, object]]]:
    """``(line number, row)`` pairs of a CSV or JSONL file; a CSV row's number
    is the line it ends on."""
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".ndjson"):
        raise TraceError("unknown trace type; use .csv, .jsonl or .ndjson", source=str(path))
    lines = _lines(path)
    if suffix == ".csv":
        yield from _csv_rows(lines, path)
        return
    for line, text in lines:
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as error:
            raise TraceError(
                f"invalid JSON: {error.msg} (column {error.colno})", source=str(path), line=line
            ) from None
        except RecursionError:
            raise TraceError(
                "invalid JSON: nested too deeply", source=str(path), line=line
            ) from None
        except ValueError as error:  # an integer past Python's digit limit
            reason = str(error).split(";")[0]
            raise TraceError(f"invalid JSON: {reason}", source=str(path), line=line) from None
        if not isinstance(row, dict):
            raise TraceError("expected a JSON object per line", source=str(path), line=line)
        yield line, row


def _csv_rows(
    lines: Iterator[tuple[int, str]], path: Path
) -> Iterator[tuple[int, Mapping[str, object]]]:
    # csv.reader, not DictReader: its line_num also counts the line that failed.
    reader = csv.reader(text for _, text in lines)
    try:
        header = next(reader, None)
        if header is None:
            return
        for fields in reader:
            if not fields:  # a blank line
                continue
            if len(fields) > len(header):
                raise TraceError(
                    "more fields than the header names", source=str(path), line=reader.line_num
                )
            # Missing trailing fields read as None, as with csv.DictReader.
            yield reader.line_num, dict(itertools.zip_longest(header, fields))
    except csv.Error as error:  # a field over csv.field_size_limit(), a NUL byte...
        raise TraceError(f"invalid CSV: {error}", source=str(path), line=reader.line_num) from None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line, each at most ``_MAX_LINE`` bytes
    and decoded as UTF-8 (a leading byte order mark dropped), with its line
    end kept; lines end at ``\\n``, ``\\r\\n`` or ``\\r``, as in text mode."""
    try:
        with path.open("rb") as handle:
            yield from _decoded(handle, path)
    except OSError as error:  # missing, a directory, unreadable
        reason = error.strerror or str(error)
        raise TraceError(f"cannot read the trace: {reason}", source=str(path)) from error


def _decoded(handle: BinaryIO, path: Path) -> Iterator[tuple[int, str]]:
    number = 0
    while chunk := handle.readline(_MAX_LINE + 1):
        if len(chunk) > _MAX_LINE:
            raise TraceError(
                f"a line longer than {_MAX_LINE:,} bytes", source=str(path), line=number + 1
            )
        for piece in chunk.splitlines(keepends=True):
            number += 1
            try:
                text = piece.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise TraceError(
                    f"not UTF-8 text (byte {error.start + 1} of the line)",
                    source=str(path),
                    line=number,
                ) from None
            yield number, text
