"""A plain progress line on stderr: ``slopolicy: 120/480 done, 16 open``."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ("StderrProgress",)


class StderrProgress:
    """Told ``(done, total, open)`` as a lane's requests end; on a terminal it
    rewrites one line at most every ``every`` seconds (wall clock), elsewhere
    (a log) it writes a line at most every ``log_every`` seconds; the last
    request's line is always written."""

    def __init__(
        self,
        name: str,
        *,
        out: TextIO | None = None,
        every: float = 0.25,
        log_every: float = 10.0,
    ) -> None:
        self.name = name
        self.out = out or sys.stderr
        self.terminal = self.out.isatty()
        self.every = every if self.terminal else log_every
        self._shown = -float("inf")

    def __call__(self, done: int, total: int, open_now: int) -> None:
        now = time.monotonic()
        last = done >= total
        if not last and now - self._shown < self.every:
            return
        self._shown = now
        start, end = ("\r", "\n" if last else "") if self.terminal else ("", "\n")
        self.out.write(f"{start}{self.name}: {done}/{total} done, {open_now} open{end}")
        self.out.flush()
