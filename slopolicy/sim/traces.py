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
the client allowed. A file or row that cannot be replayed (not UTF-8, not
CSV or JSON, a line over 1 MiB, a count or time out of range, a tenant the
policy would refuse) raises :class:`~slopolicy.errors.TraceError` naming the
file, the line and the column; bad arguments raise
:class:`~slopolicy.errors.SimulationError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Literal

from slopolicy.errors import SimulationError, TraceError, UsageError
from slopolicy.sim.trace_rows import read_rows
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
_Fail = Callable[[str], TraceError]

# Largest token count a row may give: no request is a billion tokens, so a
# larger count is a column or unit mix-up.
_MAX_TOKENS = 10**9
# Request ids are a stream's name and a row number; the policy takes ids of up
# to 256 characters.
_MAX_STREAM = 200
# Longest value quoted in an error message, in characters.
_SHOWN = 40


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
    line: int  # where the row ends in its file, for errors found later


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
    _check_options(max_new_tokens, retries, rate_scale)
    path = Path(path)
    name = _stream(stream or path.stem, path)
    rows = _parse(path, fmt, tenant, lane, max_new_tokens)
    return _workload({name: (path, rows)}, name, rate_scale, retries)


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
    _check_options(max_new_tokens, retries, rate_scale)
    found: dict[str, tuple[Path, list[_Row]]] = {}
    for stream, (file, tenant, lane) in AZURE_CLASSES.items():
        if directory is not None:
            path = Path(directory) / file
            found[stream] = path, _parse(path, AZURE_2023, tenant, lane, max_new_tokens)
            continue
        source = resources.files("slopolicy.sim") / "data" / "azure_llm_2023" / file
        with resources.as_file(source) as path:
            found[stream] = path, _parse(path, AZURE_2023, tenant, lane, max_new_tokens)
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
    _check_options(max_new_tokens, retries, rate_scale)
    found: dict[str, tuple[Path, list[_Row]]] = {}
    for path in map(Path, paths):
        name = _stream(path.stem, path)
        if name in found:
            raise TraceError("two traces share a file name", source=str(path))
        found[name] = path, _parse(path, fmt, tenant or name, lane, max_new_tokens)
    return _workload(found, "+".join(found), rate_scale, retries)


def _check_options(max_new_tokens: int, retries: int, rate_scale: float) -> None:
    """The arguments every reader shares, checked before any file is read."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise SimulationError(f"max_new_tokens must be an int, got {max_new_tokens!r}")
    if not 1 <= max_new_tokens <= _MAX_TOKENS:
        raise SimulationError(f"max_new_tokens must be within [1, {_MAX_TOKENS:,}]")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise SimulationError(f"retries must be an int >= 0, got {retries!r}")
    if isinstance(rate_scale, bool) or not isinstance(rate_scale, (int, float)):
        raise SimulationError(f"the rate scale must be a number > 0, got {rate_scale!r}")
    if not (math.isfinite(rate_scale) and rate_scale > 0):
        raise SimulationError(f"the rate scale must be a number > 0, got {rate_scale!r}")


def _stream(name: str, path: Path) -> str:
    if not name or len(name) > _MAX_STREAM:
        raise TraceError(
            f"a stream needs a name of 1 to {_MAX_STREAM} characters (the file's stem by default)",
            source=str(path),
        )
    return name


def _workload(
    streams: Mapping[str, tuple[Path, list[_Row]]], name: str, rate_scale: float, retries: int
) -> Workload:
    every = [row for _, rows in streams.values() for row in rows]
    whole, fraction = min((row.at for row in every), default=(0, 0.0))
    requests = []
    for stream, (path, rows) in streams.items():
        for n, row in enumerate(rows):
            arrival = max(0.0, (row.at[0] - whole) + (row.at[1] - fraction)) / rate_scale
            try:
                request = SimRequest(
                    id=f"{stream}-{n}",
                    arrival=arrival,
                    tenant=row.tenant,
                    prompt_tokens=row.prompt,
                    output_tokens=row.output,
                    max_new_tokens=row.max_new,
                    lane=row.lane,
                    stream=stream,
                    retries=retries,
                )
            except UsageError as error:  # what the policy would refuse, found before the run
                raise TraceError(str(error), source=str(path), line=row.line) from error
            requests.append(request)
    return Workload(tuple(requests), 0.0, name)


def _parse(
    path: Path, fmt: TraceFormat | None, tenant: str, lane: str | None, max_new_tokens: int
) -> list[_Row]:
    rows = read_rows(path)
    first = next(rows, None)
    if first is None:
        raise TraceError("the trace has no rows", source=str(path))
    fmt = fmt or _recognise(first[1], path, first[0])
    missing = [c for c in fmt.columns if c not in first[1]]
    if missing:
        have = ", ".join(sorted(first[1])) or "none"
        raise TraceError(
            f"missing column(s) {', '.join(missing)}; the trace has {_clip(have, 200)}",
            source=str(path),
            line=first[0],
        )
    parsed = [_row(first[1], fmt, tenant, lane, max_new_tokens, path, first[0])]
    parsed.extend(_row(row, fmt, tenant, lane, max_new_tokens, path, at) for at, row in rows)
    return parsed


def _recognise(row: Mapping[str, object], path: Path, line: int) -> TraceFormat:
    if all(column in row for column in AZURE_2023.columns):
        return AZURE_2023
    if all(column in row for column in TraceFormat().columns):
        # The Gate's arrival log, or any trace in its column names; its
        # optional columns are read where present.
        present = [name if name in row else None for name in ("tenant", "lane", "max_new_tokens")]
        return TraceFormat(tenant=present[0], lane=present[1], max_new_tokens=present[2])
    have = ", ".join(sorted(row)) or "none"
    raise TraceError(
        f"unrecognised trace columns ({_clip(have, 200)}); name them with --time-col, "
        "--input-col and --output-col",
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
    def fail(column: str) -> _Fail:
        return lambda message: TraceError(message, source=str(path), line=line, column=column)

    at = _time(row.get(fmt.time), fmt.time_unit, fail(fmt.time))
    # Traces count what was sent and generated; an empty prompt or reply still costs a token.
    prompt = max(1, _count(row.get(fmt.input), fail(fmt.input)))
    output = max(1, _count(row.get(fmt.output), fail(fmt.output)))
    limit = max(output, max_new_tokens)
    if fmt.max_new_tokens is not None and row.get(fmt.max_new_tokens) not in (None, ""):
        limit = max(1, _count(row.get(fmt.max_new_tokens), fail(fmt.max_new_tokens)))
    who = tenant if fmt.tenant is None else _text(row.get(fmt.tenant), fail(fmt.tenant))
    where = lane if fmt.lane is None else _text(row.get(fmt.lane), fail(fmt.lane))
    return _Row(at, who or tenant, where or lane, prompt, output, limit, line)


def _text(value: object, fail: _Fail) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):  # numeric ids in JSON
        return str(value)
    raise fail(f"expected text, got {_kind(value)}")


def _count(value: object, fail: _Fail) -> int:
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:  # not a number, or past Python's digit limit
            raise fail(f"expected a token count, got {_shown(value)}") from None
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise fail(f"expected a token count, got {_kind(value)}")
    if not 0 <= number <= _MAX_TOKENS:
        raise fail(f"token counts must be within [0, {_MAX_TOKENS:,}], got {_shown(number)}")
    return number


def _time(value: object, unit: TimeUnit, fail: _Fail) -> tuple[int, float]:
    if unit == "datetime":
        return _datetime(value, fail)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise fail(f"expected a number of {unit}, got {_kind(value)}")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (ValueError, OverflowError):  # OverflowError: an int past any float
        raise fail(f"expected a finite number of {unit}, got {_shown(value)}") from None
    if not math.isfinite(number):
        raise fail(f"expected a finite number of {unit}, got {_shown(value)}")
    return 0, number / 1000.0 if unit == "ms" else number


def _datetime(value: object, fail: _Fail) -> tuple[int, float]:
    """Whole seconds since the epoch and the fraction of an ISO 8601 time with
    any number of fractional digits (Azure's traces have seven;
    ``fromisoformat`` takes at most six before Python 3.11)."""
    if not isinstance(value, str):
        raise fail(f"expected an ISO 8601 date and time, got {_kind(value)}")
    text = value.strip().replace("T", " ", 1)
    head, dot, rest = text.partition(".")
    fraction, zone = 0.0, ""
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        fraction = float("0." + rest[:digits]) if digits else 0.0
        zone = rest[digits:]
    try:
        moment = datetime.fromisoformat(head + zone.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return round(moment.timestamp()), fraction
    except (ValueError, OverflowError):
        raise fail(f"expected an ISO 8601 date and time, got {_shown(value)}") from None


def _kind(value: object) -> str:
    return "nothing" if value is None else type(value).__name__


def _shown(value: object) -> str:
    return _clip(repr(value), _SHOWN)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
