"""One server process on a loopback port, for tests and benchmarks: the part
every such fixture shares.

A :class:`LocalServer` owns a temporary folder (its log lives there), a port
(a free one by default, kept across restarts) and at most one process.
:meth:`~LocalServer.start` launches it and polls until it answers (a
subclass's ``_ready``); a start that fails because a port picked here was
taken meanwhile is tried again on another, until one start succeeds. Every
server still running at interpreter exit is stopped.
"""

from __future__ import annotations

import atexit
import socket
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from slopolicy.errors import UsageError

__all__ = ("LocalServer", "free_port")

_RUNNING: weakref.WeakSet[LocalServer] = weakref.WeakSet()
_S = TypeVar("_S", bound="LocalServer")


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        server.stop()


class LocalServer:
    """A server process on ``127.0.0.1`` (see the module docstring).

    Subclasses name the program (``name``, ``log_name``), launch it
    (``_spawn``), say when it answers (``_ready``) and which failed start
    means the port was taken (``_port_taken``).

    Args:
        port: the port (default: a free one, kept across restarts).
    """

    #: The program, in messages.
    name = "server"
    #: The log file's name in the server's folder.
    log_name = "server.log"
    #: Seconds :meth:`start` waits by default.
    start_timeout = 15.0
    #: Seconds between readiness polls while it starts.
    poll_every = 0.05

    def __init__(self, *, port: int | None = None) -> None:
        self.port = free_port() if port is None else port
        # A port picked here is only free when picked: until the first start
        # succeeds, one taken meanwhile is picked again (then kept for restarts).
        self._repick = port is None
        self._dir = tempfile.TemporaryDirectory(prefix=f"slopolicy-{self.name}-")
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return Path(self._dir.name) / self.log_name

    def log(self) -> str:
        """What the server has logged so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _spawn(self) -> subprocess.Popen[bytes]:
        """Start the process (its log goes to :attr:`log_path`)."""
        raise NotImplementedError

    def _ready(self) -> bool:
        """Whether the started process answers."""
        raise NotImplementedError

    def _port_taken(self, log: str) -> bool:
        """Whether a start that exited with ``log`` failed on a taken port."""
        return False

    def _new_ports(self) -> None:
        """Pick free ports again (after :meth:`_port_taken`)."""
        self.port = free_port()

    def _launch(self) -> None:
        if self.running:
            raise UsageError(f"{self.name} is already running on port {self.port}")
        self.log_path.unlink(missing_ok=True)
        self._process = self._spawn()
        _RUNNING.add(self)

    def _failed(self, deadline: float) -> str | None:
        """Why the start failed, once it has (the process exited, or the
        deadline passed); ``None`` while it may still come up."""
        if self._process is not None and self._process.poll() is not None:
            return f"{self.name} exited with {self._process.returncode}"
        if time.monotonic() > deadline:
            return f"{self.name} did not answer in time"
        return None

    def _retry(self, failure: str) -> bool:
        """Whether a failed start should try again on another port."""
        self.stop()
        if self._repick and "exited" in failure and self._port_taken(self.log()):
            self._new_ports()
            return True
        return False

    def _give_up(self, failure: str) -> RuntimeError:
        return RuntimeError(f"{failure} (port {self.port}); its log ends:\n{self.log()[-3000:]}")

    def start(self: _S, timeout: float | None = None) -> _S:
        """Start (or restart) the server and wait until it answers; raises
        :class:`RuntimeError` with its log if it does not come up within
        ``timeout`` seconds (default :attr:`start_timeout`)."""
        deadline = time.monotonic() + (self.start_timeout if timeout is None else timeout)
        while True:
            self._launch()
            while (failure := self._failed(deadline)) is None:
                if self._ready():
                    self._repick = False
                    return self
                time.sleep(self.poll_every)  # polling a starting process, not waiting out a timer
            if not self._retry(failure):
                raise self._give_up(failure)

    def kill(self) -> None:
        """SIGKILL the server, as a crash: no goodbye to clients."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        _RUNNING.discard(self)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s)."""
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _RUNNING.discard(self)

    def close(self) -> None:
        """Stop the server and remove its folder."""
        self.stop()
        self._dir.cleanup()

    def __enter__(self: _S) -> _S:
        return self if self.running else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
