"""A throwaway ``redis-server`` on a free loopback port, for tests and benchmarks.

::

    with RedisServer() as server:          # starts, waits for PING
        store = RedisQuotaStore.from_url(server.url)
        ...
        server.kill()                      # SIGKILL, as a crash
        server.start()                     # the same port again

:class:`LocalCluster` starts a Redis Cluster of such servers the same way.
Needs the ``redis-server`` executable (Debian: ``apt-get install redis-server``);
:func:`redis_server_path` says whether there is one. Nothing here needs redis-py.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ("LocalCluster", "RedisServer", "free_port", "redis_server_path")


def redis_server_path() -> str | None:
    """The ``redis-server`` executable on ``PATH`` (or ``/usr/bin``), or None."""
    return shutil.which("redis-server") or shutil.which("redis-server", path="/usr/sbin:/usr/bin")


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _ask(port: int, command: str) -> bytes:
    """One inline command to the server on ``port``, and the start of its reply
    (b"" when it cannot be reached)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(command.encode() + b"\r\n")
            return conn.recv(4096)
    except OSError:
        return b""


def _pong(port: int) -> bool:
    return _ask(port, "PING").startswith(b"+PONG")


class RedisServer:
    """One ``redis-server`` process on ``127.0.0.1``.

    Args:
        persist: keep data across :meth:`kill`/:meth:`start` (an append-only
            file synced on every write); default: nothing is kept, as a
            cache-style deployment loses everything in a restart.
        executable: path of ``redis-server`` (default: found on ``PATH``).
        port: the port (default: a free one, kept across restarts).
        cluster: start it as a Redis Cluster node (see :class:`LocalCluster`).
    """

    def __init__(
        self,
        *,
        persist: bool = False,
        executable: str | None = None,
        port: int | None = None,
        cluster: bool = False,
    ) -> None:
        found = executable or redis_server_path()
        if found is None:
            raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
        self.executable = found
        self.persist = persist
        self.port = free_port() if port is None else port
        # The cluster bus would be port + 10000 by default: maybe taken, or past 65535.
        self._bus_port = free_port() if cluster else None
        # Ports picked here are only free when picked: until the first start
        # succeeds, one taken meanwhile is picked again (then kept for restarts).
        self._repick = port is None
        self._dir = tempfile.TemporaryDirectory(prefix="slopolicy-redis-")
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._process is not None and self._process.poll() is None

    def _command(self) -> list[str]:
        command = [
            self.executable,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self._dir.name,
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--loglevel", "warning",
            "--logfile", str(Path(self._dir.name) / "redis.log"),
        ]  # fmt: skip
        if self.persist:
            command += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            command += ["--appendonly", "no"]
        if self._bus_port is not None:
            command += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            command += ["--cluster-port", str(self._bus_port)]
        return command

    def start(self, timeout: float = 15.0) -> RedisServer:
        """Start (or restart) the server and wait until it answers PING."""
        if self.running:
            raise RuntimeError(f"redis-server is already running on port {self.port}")
        deadline = time.monotonic() + timeout
        while True:
            failure = self._launch(deadline)
            if failure is None:
                self._repick = False
                return self
            if not (self._repick and "Address already in use" in failure):
                raise RuntimeError(f"redis-server did not start on port {self.port}:\n{failure}")
            self.port = free_port()
            if self._bus_port is not None:
                self._bus_port = free_port()

    def _launch(self, deadline: float) -> str | None:
        """Run the process until it answers PING (``None``), or return its log
        after it exited or ``deadline`` passed."""
        log = Path(self._dir.name) / "redis.log"
        log.unlink(missing_ok=True)
        self._process = subprocess.Popen(
            self._command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        while not _pong(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                return log.read_text(errors="replace") if log.exists() else ""
            time.sleep(0.01)  # polling a starting process, not waiting out a timer
        return None

    def kill(self) -> None:
        """SIGKILL the server, as a crash: no save, no goodbye to clients."""
        if self._process is not None and self._process.poll() is None:
            os.kill(self._process.pid, signal.SIGKILL)
            self._process.wait()

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

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class LocalCluster:
    """A Redis Cluster of ``nodes`` primaries on ``127.0.0.1`` (no replicas),
    the 16,384 slots split evenly between them.

    Args:
        nodes: how many ``redis-server`` processes.
        executable: path of ``redis-server`` (default: found on ``PATH``).
    """

    def __init__(self, nodes: int = 3, *, executable: str | None = None) -> None:
        self.servers = [RedisServer(executable=executable, cluster=True) for _ in range(nodes)]

    @property
    def url(self) -> str:
        """The first node's URL: a cluster client finds the others from it."""
        return self.servers[0].url

    def start(self, timeout: float = 30.0) -> LocalCluster:
        """Start the nodes, assign the slots, join them, and wait until every
        node reports the cluster ok."""
        try:
            for server in self.servers:
                server.start()
        except RuntimeError:
            self.close()
            raise
        share = 16384 // len(self.servers)
        for number, server in enumerate(self.servers):
            last = 16383 if number == len(self.servers) - 1 else (number + 1) * share - 1
            _ask(server.port, f"CLUSTER ADDSLOTSRANGE {number * share} {last}")
        for server in self.servers[1:]:
            meet = f"CLUSTER MEET 127.0.0.1 {server.port} {server._bus_port}"
            _ask(self.servers[0].port, meet)
        deadline = time.monotonic() + timeout
        while not all(b"cluster_state:ok" in _ask(s.port, "CLUSTER INFO") for s in self.servers):
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the Redis Cluster did not form within {timeout} s")
            time.sleep(0.05)  # polling the nodes' gossip, not waiting out a timer
        return self

    def close(self) -> None:
        """Stop every node and remove their directories."""
        for server in self.servers:
            server.close()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
