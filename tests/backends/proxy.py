"""A loopback TCP proxy that can hold traffic: a slow network or a stalled Redis, on demand."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class StallingProxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream``. While stalled, bytes from
    clients are held (in order) and delivered on :meth:`resume`, even for
    clients that gave up and closed meanwhile, as a real network would."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stall(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, held: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                if held:
                    await self._open.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        for task in (
            asyncio.create_task(self._pump(reader, up_writer, held=True)),
            asyncio.create_task(self._pump(up_reader, writer, held=False)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[StallingProxy]:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            self.resume()
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
