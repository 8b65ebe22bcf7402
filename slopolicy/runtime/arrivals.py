"""The arrival log: one JSON line per request that reached its outcome.

Point a :class:`~slopolicy.Gate` at a file (``Gate(policy, arrival_log="arrivals.jsonl")``)
and it appends a line for every request as it ends, so your own traffic can
later be replayed through the simulator. Schema (version 1), one object per
line, keys always present and in this order::

    {"arrival": 12.034512, "id": "req-1f2e-7", "tenant": "acme", "lane": "interactive",
     "prompt_tokens": 1200, "max_new_tokens": 256, "output_tokens": 240, "outcome": "completed"}

- ``arrival``: seconds from the gate opening to the request's arrival, on the
  gate's clock (``anyio.current_time()``), rounded to microseconds. Each gate
  session starts again at 0, so keep one file per session.
- ``id``, ``tenant``: as on the request.
- ``lane``: the lane the policy routed it to; ``null`` when refused before routing.
- ``prompt_tokens``: the prompt's tokens as the policy counted them.
- ``max_new_tokens``: as the caller asked, before lane caps or ladder rungs
  (a replay applies its own policy's).
- ``output_tokens``: tokens actually produced (the engine's usage count when
  the host reported one); 0 for requests that never started.
- ``outcome``: ``completed``, ``failed``, ``cancelled``, ``expired`` or ``rejected``.

Lines are written in the order requests *end*; sort by ``arrival`` to replay.
Records are buffered in memory and appended from a worker thread
(``anyio.to_thread``) every ``flush_every`` seconds, or sooner once
``max_buffered`` are waiting, so the event loop never waits on the disk; the
gate flushes what is left when it closes. A path is opened when the gate is
entered, so a log that cannot be written fails there (:class:`UsageError`),
before any traffic; a write that fails later (a full disk, a closed stream)
is logged on ``slopolicy.gate`` and its records counted in ``dropped``: the
log never takes the gate down.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

import anyio
import anyio.to_thread

from slopolicy.core.outcome import Finished
from slopolicy.core.request import Request
from slopolicy.errors import UsageError

__all__ = ("ArrivalLog", "ArrivalRecord")

logger = logging.getLogger("slopolicy.gate")


@dataclass(frozen=True, slots=True)
class ArrivalRecord:
    """One request's line in the arrival log (see the module docstring)."""

    arrival: float
    id: str
    tenant: str
    lane: str | None
    prompt_tokens: int
    max_new_tokens: int
    output_tokens: int
    outcome: str

    @classmethod
    def ended(cls, finished: Finished, request: Request, epoch: float) -> ArrivalRecord:
        """The record of an accepted request that ended as ``finished``."""
        return cls(
            finished.arrival - epoch,
            finished.id,
            finished.tenant,
            finished.lane,
            finished.prompt_tokens,
            request.max_new_tokens,
            finished.output_tokens,
            finished.outcome.value,
        )

    @classmethod
    def refused(
        cls, request: Request, lane: str | None, prompt_tokens: int, arrival: float
    ) -> ArrivalRecord:
        """The record of a request refused at submit (``arrival`` in seconds
        since the gate opened)."""
        return cls(
            arrival,
            request.id,
            request.tenant,
            lane,
            prompt_tokens,
            request.max_new_tokens,
            0,
            "rejected",
        )

    def to_json(self) -> str:
        """The JSON line, without the newline."""
        return json.dumps(
            {
                "arrival": round(self.arrival, 6),
                "id": self.id,
                "tenant": self.tenant,
                "lane": self.lane,
                "prompt_tokens": self.prompt_tokens,
                "max_new_tokens": self.max_new_tokens,
                "output_tokens": self.output_tokens,
                "outcome": self.outcome,
            },
            separators=(",", ":"),
        )


class ArrivalLog:
    """Appends :class:`ArrivalRecord` lines to a file, off the event loop.

    Args:
        target: a path (opened for appending, UTF-8, on the first flush) or an
            open text stream (written to, never closed by the log).
        flush_every: seconds between flushes while the gate runs.
        max_buffered: records that trigger an early flush.
    """

    __slots__ = (
        "_buffer",
        "_file",
        "_lock",
        "_owned",
        "_path",
        "_wake",
        "dropped",
        "flush_every",
        "max_buffered",
        "written",
    )

    def __init__(
        self,
        target: str | os.PathLike[str] | IO[str],
        *,
        flush_every: float = 1.0,
        max_buffered: int = 1024,
    ) -> None:
        if not flush_every > 0:
            raise UsageError(f"flush_every must be > 0 seconds, got {flush_every!r}")
        if max_buffered < 1:
            raise UsageError(f"max_buffered must be >= 1, got {max_buffered!r}")
        if isinstance(target, (str, os.PathLike)):
            self._path: str | os.PathLike[str] | None = target
            self._file: IO[str] | None = None
        else:
            self._path, self._file = None, target
        self._owned = self._path is not None
        self.flush_every = flush_every
        self.max_buffered = max_buffered
        self._buffer: list[ArrivalRecord] = []
        self._wake: anyio.Event | None = None
        self._lock: anyio.Lock | None = None
        self.written = 0  # records written to the file so far
        self.dropped = 0  # records lost to failed writes

    def record(self, record: ArrivalRecord) -> None:
        """Buffer one record (no I/O here)."""
        buffer = self._buffer
        buffer.append(record)
        if len(buffer) >= self.max_buffered and self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        """Flush every ``flush_every`` seconds, or sooner when the buffer
        fills, until cancelled (the gate runs this in its task group)."""
        while True:
            self._wake = anyio.Event()
            if len(self._buffer) < self.max_buffered:
                with anyio.move_on_after(self.flush_every):
                    await self._wake.wait()
            await self.flush()

    async def open(self) -> None:
        """Open the path (for appending, in a worker thread) unless already
        open; raises :class:`UsageError` when it cannot be written."""
        if self._file is None and self._path is not None:
            path = self._path
            try:
                self._file = await anyio.to_thread.run_sync(_append_to, path)
            except OSError as error:
                reason = error.strerror or str(error)
                raise UsageError(f"cannot open the arrival log {str(path)!r}: {reason}") from error

    async def flush(self) -> None:
        """Write the buffered records now, in a worker thread."""
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            records, self._buffer = self._buffer, []
            if not records:
                return
            try:
                # Not abandoned on cancel: the thread finishes these lines.
                await anyio.to_thread.run_sync(self._write, records)
            except Exception:  # a full disk, a closed stream: never the gate's end
                self.dropped += len(records)
                logger.warning("the arrival log lost %d record(s)", len(records), exc_info=True)

    async def aclose(self) -> None:
        """Flush what is left and close the file the log opened."""
        await self.flush()
        if self._owned and self._file is not None:
            file, self._file = self._file, None
            try:
                await anyio.to_thread.run_sync(file.close)
            except OSError:  # everything was flushed; only the close itself failed
                logger.warning("closing the arrival log failed", exc_info=True)

    def _write(self, records: Sequence[ArrivalRecord]) -> None:
        if self._file is None:  # not opened by a gate: the first flush opens it
            assert self._path is not None
            self._file = _append_to(self._path)
        self._file.write("".join(record.to_json() + "\n" for record in records))
        self._file.flush()
        self.written += len(records)


def _append_to(path: str | os.PathLike[str]) -> IO[str]:
    return open(path, "a", encoding="utf-8")  # the log closes it in aclose
