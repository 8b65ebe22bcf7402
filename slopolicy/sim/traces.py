"""Replaying recorded traffic: CSV or JSONL traces with a column mapping.

A :class:`TraceFormat` names the columns (``time``, ``input``, ``output`` and
optionally ``tenant``, ``lane``, ``max_new_tokens``) and the time unit (``s``,
``ms`` or ``datetime``: ISO 8601, any number of fractional digits). Known
formats are recognised from the header:

* the Azure LLM inference traces 2023 (``TIMESTAMP``, ``ContextTokens``,
  ``GeneratedTokens``; CC-BY-4.0, Patel et al., "Splitwise", ISCA 2024);
* the Gate's arrival log (JSONL with ``arrival``, ``tenant``, ``lane``,
  ``prompt_tokens``, ``max_new_tokens``, ``output_tokens``; ``arrival`` in
  monotonic seconds), or any trace with its ``arrival``, ``prompt_tokens`` and
  ``output_tokens`` columns (the others are optional).

Arrivals are shifted so the first is at 0 and divided by ``rate_scale``.
A request without a ``max_new_tokens`` column asks for
``max(output, max_new_tokens)``: the trace says what was generated, not what
the client allowed. Bad rows raise :class:`~slopolicy.errors.SimulationError`
naming the file, line and column.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Literal

from slopolicy.errors import SimulationError
from slopolicy.sim.workload import SimRequest, Workload

__all__ = (
    "AZURE_2023",
    "AZURE_CLASSES",
    "GATE_LOG",
    "TimeUnit",
    "TraceFormat",
    "azure_2023",
    "read_trace",
    "read_traces",
)

TimeUnit = Literal["s", "ms", "datetime"]
_Fail = Callable[[str], SimulationError]


@dataclass(frozen=True, slots=True)
class TraceFormat:
    """Which columns hold what, and the unit of ``time``."""

    time: str = "arrival"
    input: str = "prompt_tokens"
    output: str = "output_tokens"
    tenant: str | None = None
    lane: str | None = None
    max_new_tokens: str | None = None
    time_unit: TimeUnit = "s"

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns this format reads."""
        named = (self.time, self.input, self.output, self.tenant, self.lane, self.max_new_tokens)
        return tuple(c for c in named if c is not None)


#: The Azure LLM inference traces 2023.
AZURE_2023 = TraceFormat("TIMESTAMP", "ContextTokens", "GeneratedTokens", time_unit="datetime")
#: The Gate's arrival log.
GATE_LOG = TraceFormat(
    "arrival", "prompt_tokens", "output_tokens", "tenant", "lane", "max_new_tokens", "s"
)
#: The Azure 2023 classes: file, then the tenant and lane hint each replays as.
AZURE_CLASSES: Mapping[str, tuple[str, str, str]] = {
    "code": ("AzureLLMInferenceTrace_code.csv", "code", "code"),
    "conversation": ("AzureLLMInferenceTrace_conv.csv", "conversation", "interactive"),
}


@dataclass(frozen=True, slots=True)
class _Row:
    # Seconds as (whole, fraction): epoch seconds as one float would keep only
    # about 0.1 µs, and traces are shifted to start at 0 only once merged.
    at: tuple[int, float]
    tenant: str
    lane: str | None
    prompt: int
    output: int
    max_new: int


def read_trace(
    path: str | Path,
    fmt: TraceFormat | None = None,
    *,
    stream: str | None = None,
    tenant: str = "default",
    lane: str | None = None,
    max_new_tokens: int = 1024,
    retries: int = 0,
    rate_scale: float = 1.0,
) -> Workload:
    """The requests of one trace file (``.csv``, ``.jsonl`` or ``.ndjson``).

    ``fmt`` defaults to the format recognised from the header. ``stream``
    (default: the file's stem) prefixes request ids and names the class;
    ``tenant`` and ``lane`` apply where the trace has no such column.
    """
    path = Path(path)
    name = stream or path.stem
    rows = _parse(path, fmt, tenant, lane, max_new_tokens)
    return _workload({name: rows}, name, rate_scale, retries)


def azure_2023(
    *,
    rate_scale: float = 1.0,
    max_new_tokens: int = 1024,
    retries: int = 0,
    directory: str | Path | None = None,
) -> Workload:
    """The merged Azure 2023 traces (about 28k requests over an hour): code as
    tenant and lane ``code``, conversation as tenant ``conversation`` in lane
    ``interactive``, on one timeline. ``directory`` holds the two CSV files
    (default: the copy shipped in this package)."""
    found: dict[str, list[_Row]] = {}
    for stream, (file, tenant, lane) in AZURE_CLASSES.items():
        if directory is not None:
            found[stream] = _parse(Path(directory) / file, AZURE_2023, tenant, lane, max_new_tokens)
            continue
        source = resources.files("slopolicy.sim") / "data" / "azure_llm_2023" / file
        with resources.as_file(source) as path:
            found[stream] = _parse(path, AZURE_2023, tenant, lane, max_new_tokens)
    return _workload(found, "azure-2023", rate_scale, retries)


def read_traces(
    paths: list[str | Path],
    fmt: TraceFormat | None = None,
    *,
    tenant: str | None = None,
    lane: str | None = None,
    max_new_tokens: int = 1024,
    retries: int = 0,
    rate_scale: float = 1.0,
) -> Workload:
    """Several trace files on one timeline (their own timestamps kept), each
    a stream named after its file; ``tenant`` defaults to that name too."""
    found: dict[str, list[_Row]] = {}
    for path in map(Path, paths):
        name = path.stem
        if name in found:
            raise SimulationError("two traces share a file name", source=str(path))
        found[name] = _parse(path, fmt, tenant or name, lane, max_new_tokens)
    return _workload(found, "+".join(found), rate_scale, retries)


def _workload(
    streams: Mapping[str, list[_Row]], name: str, rate_scale: float, retries: int
) -> Workload:
    if not (math.isfinite(rate_scale) and rate_scale > 0):
        raise SimulationError(f"the rate scale must be a number > 0, got {rate_scale!r}")
    whole, fraction = min((row.at for rows in streams.values() for row in rows), default=(0, 0.0))
    requests = [
        SimRequest(
            id=f"{stream}-{n}",
            arrival=max(0.0, (row.at[0] - whole) + (row.at[1] - fraction)) / rate_scale,
            tenant=row.tenant,
            prompt_tokens=row.prompt,
            output_tokens=row.output,
            max_new_tokens=row.max_new,
            lane=row.lane,
            stream=stream,
            retries=retries,
        )
        for stream, rows in streams.items()
        for n, row in enumerate(rows)
    ]
    return Workload(tuple(requests), 0.0, name)


def _parse(
    path: Path, fmt: TraceFormat | None, tenant: str, lane: str | None, max_new_tokens: int
) -> list[_Row]:
    rows = _rows(path)
    first = next(rows, None)
    if first is None:
        raise SimulationError("the trace has no rows", source=str(path))
    fmt = fmt or _recognise(first[1], path, first[0])
    missing = [c for c in fmt.columns if c not in first[1]]
    if missing:
        have = ", ".join(sorted(first[1])) or "none"
        raise SimulationError(
            f"missing column(s) {', '.join(missing)}; the trace has {have}",
            source=str(path),
            line=first[0],
        )
    parsed = [_row(first[1], fmt, tenant, lane, max_new_tokens, path, first[0])]
    parsed.extend(_row(row, fmt, tenant, lane, max_new_tokens, path, at) for at, row in rows)
    return parsed


def _rows(path: Path) -> Iterator[tuple[int, Mapping[str, object]]]:
    """``(line number, row)`` pairs of a CSV or JSONL file."""
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".ndjson"):
        raise SimulationError("unknown trace type; use .csv, .jsonl or .ndjson", source=str(path))
    try:
        handle = path.open(encoding="utf-8-sig", newline="")
    except OSError as error:
        raise SimulationError(f"cannot read the trace: {error}", source=str(path)) from error
    with handle:
        if suffix == ".csv":
            reader = csv.DictReader(handle)
            for row in reader:
                yield reader.line_num, row
            return
        for line, text in enumerate(handle, 1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as error:
                raise SimulationError(
                    f"invalid JSON: {error.msg}", source=str(path), line=line
                ) from error
            if not isinstance(row, dict):
                raise SimulationError(
                    "expected a JSON object per line", source=str(path), line=line
                )
            yield line, row


def _recognise(row: Mapping[str, object], path: Path, line: int) -> TraceFormat:
    if all(column in row for column in AZURE_2023.columns):
        return AZURE_2023
    if all(column in row for column in TraceFormat().columns):
        # The Gate's arrival log, or any trace in its column names; its
        # optional columns are read where present.
        present = [name if name in row else None for name in ("tenant", "lane", "max_new_tokens")]
        return TraceFormat(tenant=present[0], lane=present[1], max_new_tokens=present[2])
    have = ", ".join(sorted(row)) or "none"
    raise SimulationError(
        f"unrecognised trace columns ({have}); name them with --time-col, --input-col "
        "and --output-col",
        source=str(path),
        line=line,
    )


def _row(
    row: Mapping[str, object],
    fmt: TraceFormat,
    tenant: str,
    lane: str | None,
    max_new_tokens: int,
    path: Path,
    line: int,
) -> _Row:
    def fail(column: str, message: str) -> SimulationError:
        return SimulationError(f"column {column!r}: {message}", source=str(path), line=line)

    at = _time(row.get(fmt.time), fmt.time_unit, lambda m: fail(fmt.time, m))
    # Traces count what was sent and generated; an empty prompt or reply still costs a token.
    prompt = max(1, _count(row.get(fmt.input), lambda m: fail(fmt.input, m)))
    output = max(1, _count(row.get(fmt.output), lambda m: fail(fmt.output, m)))
    limit = max(output, max_new_tokens)
    if fmt.max_new_tokens is not None and row.get(fmt.max_new_tokens) not in (None, ""):
        limit = max(1, _count(row.get(fmt.max_new_tokens), lambda m: fail("max_new_tokens", m)))
    who = _text(row, fmt.tenant) or tenant
    where = _text(row, fmt.lane) or lane
    return _Row(at, who, where, prompt, output, limit)


def _text(row: Mapping[str, object], column: str | None) -> str | None:
    if column is None:
        return None
    value = row.get(column)
    return None if value in (None, "") else str(value)


def _count(value: object, fail: _Fail) -> int:
    if isinstance(value, bool):
        raise fail("expected a token count")
    if isinstance(value, int):
        number = value
    else:
        try:
            number = int(str(value).strip())
        except ValueError:
            raise fail(f"expected a token count, got {value!r}") from None
    if number < 0:
        raise fail(f"token counts must be >= 0, got {number}")
    return number


def _time(value: object, unit: TimeUnit, fail: _Fail) -> tuple[int, float]:
    if unit == "datetime":
        return _datetime(value, fail)
    if isinstance(value, bool):
        raise fail("expected a number")
    try:
        number = float(value) if isinstance(value, (int, float)) else float(str(value).strip())
    except ValueError:
        raise fail(f"expected a number of {unit}, got {value!r}") from None
    if not math.isfinite(number):
        raise fail("times must be finite")
    return 0, number / 1000.0 if unit == "ms" else number


def _datetime(value: object, fail: _Fail) -> tuple[int, float]:
    """Whole seconds since the epoch and the fraction of an ISO 8601 time with
    any number of fractional digits (Azure's traces have seven;
    ``fromisoformat`` takes at most six before Python 3.11)."""
    text = str(value).strip().replace("T", " ", 1)
    head, dot, rest = text.partition(".")
    fraction, zone = 0.0, ""
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        fraction = float("0." + rest[:digits]) if digits else 0.0
        zone = rest[digits:]
    try:
        moment = datetime.fromisoformat(head + zone.replace("Z", "+00:00"))
    except ValueError:
        raise fail(f"expected an ISO 8601 date and time, got {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return round(moment.timestamp()), fraction
