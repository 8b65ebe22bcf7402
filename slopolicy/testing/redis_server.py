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

import shutil
import socket
import subprocess
import time
from types import TracebackType

from slopolicy.testing.local_server import LocalServer, free_port

__all__ = ("LocalCluster", "RedisServer", "free_port", "redis_server_path")


def redis_server_path() -> str | None:
    """The ``redis-server`` executable on ``PATH`` (or ``/usr/bin``), or None."""
    return shutil.which("redis-server") or shutil.which("redis-server", path="/usr/sbin:/usr/bin")


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


class RedisServer(LocalServer):
    """One ``redis-server`` process on ``127.0.0.1``.

    Args:
        persist: keep data across :meth:`kill`/:meth:`start` (an append-only
            file synced on every write); default: nothing is kept, as a
            cache-style deployment loses everything in a restart.
        executable: path of ``redis-server`` (default: found on ``PATH``).
        port: the port (default: a free one, kept across restarts).
        cluster: start it as a Redis Cluster node (see :class:`LocalCluster`).
    """

    name = "redis-server"
    log_name = "redis.log"
    poll_every = 0.01

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
        super().__init__(port=port)
        self.executable = found
        self.persist = persist
        # The cluster bus would be port + 10000 by default: maybe taken, or past 65535.
        self._bus_port = free_port() if cluster else None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

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
            "--logfile", str(self.log_path),
        ]  # fmt: skip
        if self.persist:
            command += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            command += ["--appendonly", "no"]
        if self._bus_port is not None:
            command += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            command += ["--cluster-port", str(self._bus_port)]
        return command

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self._command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def _ready(self) -> bool:
        return _pong(self.port)

    def _port_taken(self, log: str) -> bool:
        return "Address already in use" in log

    def _new_ports(self) -> None:
        super()._new_ports()
        if self._bus_port is not None:
            self._bus_port = free_port()


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
