"""A real broker in a child process (``twistd -n mqbroker``) on free loopback ports."""

from __future__ import annotations

import os
import pathlib
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

LISTENERS = ("native", "mqtt", "amqp", "kafka", "http")
#: twistd run by this interpreter (``python -m twisted.scripts.twistd`` has no ``__main__`` and exits at once).
TWISTD = (sys.executable, "-c", "from twisted.scripts.twistd import run; run()")
#: After a graceful shutdown twistd re-raises the signal that stopped it, so SIGTERM shows as -15.
GRACEFUL_EXIT_CODES = (0, -signal.SIGTERM)


#: Starts tried when a listener's port was taken between ``free_port`` and the broker's bind.
PORT_RETRIES = 3
_PORT_TAKEN = re.compile(r"Couldn't listen on [0-9.]+:(\d+): \[Errno 98\]")


def _taken_listener(log: str, ports: dict[str, int]) -> str | None:
    """The listener whose port the broker found taken, according to its log (None: another failure)."""
    found = _PORT_TAKEN.search(log)
    return next((name for name, port in ports.items() if found and port == int(found.group(1))), None)


def running(process: BrokerProcess) -> Iterator[BrokerProcess]:
    """Start ``process``, yield it, kill it afterwards (the body of a broker fixture)."""
    process.start()
    try:
        yield process
    finally:
        process.kill()


def free_port() -> int:
    """A TCP port nobody listens on right now, below the kernel's ephemeral range.

    A port the kernel picked (bind to 0) could be handed out again, as a connection's source port or
    to another port-0 listener, between this pick and the broker's bind: a fixed port such as a
    cluster's controller port then fails to bind. Ports below ``ip_local_port_range`` are never
    handed out by the kernel, and one process never gets the same one twice. Under pytest-xdist each
    worker picks from its own share of that range (``_port_range``), so no worker takes a port another
    one picked, e.g. that of a broker it killed and is about to restart.
    """
    return free_port_pair(0)


def free_port_pair(offset: int) -> int:
    """A free port (as ``free_port``) whose partner ``offset`` above is free too and in this worker's share."""
    low, high = _port_range()
    while True:
        port = _ports.randrange(low, high - offset)
        if port in _handed_out or port + offset in _handed_out:
            continue
        if not all(_bindable(candidate) for candidate in {port, port + offset}):
            continue
        _handed_out.update({port, port + offset})
        return port


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_range() -> tuple[int, int]:
    """``[low, high)``: the ports below the ephemeral range, or this pytest-xdist worker's slice of them."""
    low, high = _PORTS_LOW, _ephemeral_low()
    worker, workers = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or workers < 2:
        return low, high
    share = (high - low) // workers
    index = int(worker[2:]) % workers  # a restarted worker gets the next number
    return low + index * share, low + (index + 1) * share


_PORTS_LOW = 10_000
_ports = random.Random()
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out by itself (32768 where it cannot be read)."""
    try:
        return int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


@dataclass
class BrokerProcess:
    """Starts, stops, kills and restarts one broker; keeps its data directory and ports."""

    data_dir: pathlib.Path
    extra_args: list[str] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    log_path: pathlib.Path | None = None
    #: Variables added to the broker's environment (e.g. a libfaketime preload for clock jumps).
    environment: dict[str, str] = field(default_factory=dict)
    #: Whether a first start may move a listener whose port another process took (False: proxies point at them).
    movable_ports: bool = True
    _started: bool = False

    def __post_init__(self) -> None:
        if not self.ports:
            self.ports = {name: free_port() for name in LISTENERS}
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the native listener."""
        return f"127.0.0.1:{self.ports['native']}"

    def command(self) -> list[str]:
        """The command line that runs this broker."""
        return [
            *TWISTD, "-n", "--pidfile=", "--logfile=-", "mqbroker",
            "--data-dir", str(self.data_dir), "--host", "127.0.0.1",
            "--native-port", str(self.ports["native"]), "--mqtt-port", str(self.ports["mqtt"]),
            "--amqp-port", str(self.ports["amqp"]), "--kafka-port", str(self.ports["kafka"]),
            "--http-port", str(self.ports["http"]),
            "--controller-port", "0", *self.extra_args,
        ]

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the broker and wait until /ready answers.

        ``free_port`` cannot reserve a port: on a shared machine another process may take it before
        the broker binds it. On a first start (and while ``movable_ports``) a listener port found
        taken is replaced by another free one and the start retried; a restart keeps its ports.
        """
        for attempt in range(PORT_RETRIES):
            log_start = self.log_path.stat().st_size if self.log_path and self.log_path.exists() else 0
            try:
                self._start_once(timeout_s)
                self._started = True
                return
            except RuntimeError:
                taken = _taken_listener(self.log_text()[log_start:], self.ports)
                if taken is None or self._started or not self.movable_ports or attempt == PORT_RETRIES - 1:
                    raise
                self.ports[taken] = free_port()

    def _start_once(self, timeout_s: float) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.data_dir.parent,
                                        env={**os.environ, **self.environment} if self.environment else None)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{self.log_text()[-4000:]}")
            if self.is_ready():
                return
            time.sleep(0.05)
        self.process.kill()  # a broker that never got ready is no fixture's to kill: it would outlive the run
        self.process.wait()
        raise RuntimeError(f"broker not ready after {timeout_s}s:\n{self.log_text()[-4000:]}")

    def is_ready(self) -> bool:
        """Whether ``/ready`` answers 200 now (503 while starting, or nothing listening yet)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['http']}/ready", timeout=1) as reply:
                return reply.status == 200
        except OSError:
            return False

    def listening(self, listener: str) -> bool:
        """Whether the listener named ``listener`` (``"mqtt"``, ``"http"``, ...) accepts connections now."""
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.ports[listener])) == 0

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM and wait (graceful shutdown); return the exit code."""
        return self._signal_and_wait(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown work at all."""
        self._signal_and_wait(signal.SIGKILL, 10.0)

    def restart(self) -> None:
        """Start again on the same ports and data directory."""
        self.start()

    def log_text(self) -> str:
        """Everything the broker logged so far."""
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def _signal_and_wait(self, signal_number: int, timeout_s: float) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        os.kill(self.process.pid, signal_number)
        return self.process.wait(timeout=timeout_s)
