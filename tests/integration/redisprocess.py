"""A real ``redis-server`` (the Debian package) in a child process on a free loopback port."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import redis

from mqbroker.security.certs import CertificateFiles
from tests.integration.brokerprocess import free_port


@dataclass
class RedisProcess:
    """Starts, kills and restarts one Redis server; its append-only file (fsync always) survives restarts."""

    directory: pathlib.Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    #: ``always``: every write is fsynced before Redis answers (what the crash tests need); ``everysec`` or ``no``.
    appendfsync: str = "always"
    #: Serve TLS only (``--tls-port``), with this CA's server certificate; client certificates optional.
    tls: CertificateFiles | None = None

    def start(self, timeout_s: float = 10.0) -> None:
        """Start the server and wait until it answers PING."""
        self.directory.mkdir(parents=True, exist_ok=True)
        listen = ["--port", str(self.port)]
        if self.tls is not None:
            listen = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.tls.server),
                      "--tls-key-file", str(self.tls.server_key), "--tls-ca-cert-file", str(self.tls.ca),
                      "--tls-auth-clients", "optional"]
        self.process = subprocess.Popen(
            ["redis-server", *listen, "--bind", "127.0.0.1", "--dir", str(self.directory),
             "--appendonly", "yes", "--appendfsync", self.appendfsync, "--save", "", "--logfile", "redis.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.client().ping():
                    return
            except redis.ConnectionError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not answer PING in time")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL (what was fsynced to the append-only file survives)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def url(self, database: int = 0) -> str:
        """``redis://127.0.0.1:<port>/<database>`` (``rediss://`` with TLS)."""
        return f"{'rediss' if self.tls is not None else 'redis'}://127.0.0.1:{self.port}/{database}"

    def client(self, database: int = 0) -> redis.Redis:
        """A redis-py client (an independent check of what the connectors wrote)."""
        if self.tls is not None:
            return redis.Redis(host="127.0.0.1", port=self.port, db=database, socket_timeout=10, ssl=True,
                               ssl_ca_certs=str(self.tls.ca))
        return redis.Redis(host="127.0.0.1", port=self.port, db=database, socket_timeout=10)


def running_redis(directory: pathlib.Path) -> Iterator[RedisProcess]:
    """Start a Redis server, yield it, kill it afterwards (the body of a fixture)."""
    server = RedisProcess(directory)
    server.start()
    try:
        yield server
    finally:
        server.kill()
