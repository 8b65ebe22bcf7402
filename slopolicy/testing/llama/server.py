"""One ``llama-server`` process on a free loopback port, for tests and benchmarks.

::

    found = find_llama_server()                      # None until built
    model = tiny_model(found.vocab)
    with LlamaServer(found, model, slots=4, context=16_384) as server:
        client = AsyncOpenAI(base_url=f"{server.url}/v1", api_key="-")
        ...
        server.kill()                                # SIGKILL, as a crash
        server.start()                               # the same port again

The server runs ``--metrics`` (Prometheus ``/metrics``), ``/slots`` and the
built-in ``llama3`` chat template (``--no-jinja --chat-template llama3``),
with ``slots`` parallel sequences (``-np``) sharing ``context`` tokens of KV
(``-c``: each slot gets ``context // slots``). :meth:`LlamaServer.start`
waits until ``/health`` answers 200; ``astart`` is its async twin (it polls
without blocking the event loop; bound it with ``anyio.fail_after``).

No orphans: on Linux the process gets ``PR_SET_PDEATHSIG`` (SIGKILL when the
thread that started it dies, so start it from the main thread or another that
outlives it; from other threads the guard is left off), and every server still
running at interpreter exit is stopped.
"""

from __future__ import annotations

import ctypes
import math
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from slopolicy.errors import UsageError
from slopolicy.testing.llama.build import Installation
from slopolicy.testing.local_server import LocalServer

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ("LlamaServer",)

_PR_SET_PDEATHSIG = 1


def _pre_exec() -> Callable[[], None] | None:
    """What the child runs between fork and exec: ``prctl`` (looked up here,
    in the parent: the child only calls it) on Linux, from the main thread."""
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None).prctl
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class LlamaServer(LocalServer):
    """One ``llama-server`` on ``127.0.0.1``.

    Args:
        installation: the build to run (see :func:`find_llama_server`).
        model: the GGUF file to serve (see :func:`tiny_model`).
        slots: parallel sequences, ``-np``.
        context: KV tokens shared by the slots, ``-c`` (each slot gets
            ``context // slots``).
        threads: CPU threads, ``-t``.
        port: the port (default: a free one, kept across restarts).
        extra_args: more command-line arguments, appended as given.
    """

    name = "llama-server"
    log_name = "llama-server.log"
    start_timeout = 60.0

    def __init__(
        self,
        installation: Installation,
        model: Path,
        *,
        slots: int = 4,
        context: int = 16_384,
        threads: int = 2,
        port: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        for name, value in (("slots", slots), ("context", context), ("threads", threads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} must be an int >= 1, got {value!r}")
        if context < slots:
            raise UsageError(f"context ({context} tokens) must hold a token per slot ({slots})")
        super().__init__(port=port)
        self.installation = installation
        self.model = model
        self.slots = slots
        self.context = context
        self.threads = threads
        self.extra_args = tuple(extra_args)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (the OpenAI API is under ``/v1``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def slot_context(self) -> int:
        """KV tokens each slot holds: the longest prompt plus output, in tokens."""
        return self.context // self.slots

    def command(self) -> list[str]:
        """The command line the server runs with."""
        return [
            str(self.installation.executable),
            "-m", str(self.model),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "-c", str(self.context),
            "-np", str(self.slots),
            "-t", str(self.threads),
            "--metrics",
            "--slots",
            # The built-in template by name: with Jinja on (the default) the
            # name would be taken as a template's text.
            "--no-jinja", "--chat-template", "llama3",
            "--no-webui",
            *self.extra_args,
        ]  # fmt: skip

    def _environment(self) -> dict[str, str]:
        env = self.installation.environment()
        # The build uses OpenMP, whose threads spin while they wait: on CPUs
        # shared with other work (a test run, CI) that made decoding 20-50x
        # slower here. Sleeping waiters cost nothing when the CPUs are idle.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        return env

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log_path.open("wb") as log:
            return subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._environment(),
                preexec_fn=_pre_exec(),  # prctl only: safe between fork and exec
            )

    def _health(self) -> int | None:
        """``/health``'s status (200: ready; 503: loading), or None: no answer."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2.0) as answer:
                status: int = answer.status
                return status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return None

    def _ready(self) -> bool:
        return self._health() == 200

    def _port_taken(self, log: str) -> bool:
        return "bind" in log

    async def astart(self) -> LlamaServer:
        """:meth:`start` without blocking the event loop: the process starts
        from the calling thread, ``/health`` is polled in a worker thread.
        It waits until the server is healthy or exits: bound it with
        ``anyio.fail_after`` (a cancelled start stops the process)."""
        deadline = math.inf
        try:
            return await self._astart(deadline)
        except BaseException:
            self.stop()
            raise

    async def _astart(self, deadline: float) -> LlamaServer:
        while True:
            self._launch()
            while (failure := self._failed(deadline)) is None:
                if await anyio.to_thread.run_sync(self._ready):
                    self._repick = False
                    return self
                await anyio.sleep(self.poll_every)  # polling a starting process
            if not self._retry(failure):
                raise self._give_up(failure)

    def openai_client(self, **options: Any) -> AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` for this server's ``/v1`` (needs
        ``slopolicy[openai]``; ``options`` go to the client), which opens a
        connection per request instead of reusing idle ones.

        llama-server serves ``-np + 4`` connections from fixed HTTP threads
        and more from threads that close their connection after one request,
        without saying so: a pooled connection reused at once (a gate starts
        the next request as one ends) can be the one being closed, and the
        request fails with "Server disconnected without sending a response"
        (``engine_disconnected``; the adapter never retries). Here 5 of 480
        back-to-back requests on 60 connections did, and none without reuse.
        """
        from slopolicy.replay.target import fresh_connections_client

        return fresh_connections_client(f"{self.url}/v1", "-", **options)
