"""Broker processes for the benchmarks: free ports, a ``twistd mqbroker`` child, CPU time from /proc."""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def process_tree_cpu_s(root: int) -> float:
    """User + system CPU seconds of ``root`` and its descendants (RabbitMQ runs beam under a shell)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
                stats[int(entry.name)] = fields
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, pending = 0, [root]
    while pending:
        pid = pending.pop()
        if pid in stats:
            total += int(stats[pid][11]) + int(stats[pid][12])
        pending += children.get(pid, [])
    return total / CLOCK_TICKS_PER_S


@contextlib.contextmanager
def mqbroker_process(work: pathlib.Path, extra_args: list[str], timeout_s: float = 60.0) -> Iterator[tuple[str, int]]:
    """mqbroker on free ports (native and HTTP only), data under ``work``; yields (bootstrap, pid) once ``/ready``."""
    ports = {name: free_port() for name in ("native", "http")}
    command = [
        sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n", "--pidfile=",
        f"--logfile={work / 'mqbroker.log'}", "mqbroker", "--data-dir", str(work / "data"), "--host", "127.0.0.1",
        "--native-port", str(ports["native"]), "--http-port", str(ports["http"]),
        "--mqtt-port", "0", "--amqp-port", "0", "--controller-port", "0", *extra_args,
    ]
    process = subprocess.Popen(command, cwd=work)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"broker exited with {process.returncode}; see {work / 'mqbroker.log'}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ports['http']}/ready", timeout=1):
                    break
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the broker was not ready within {timeout_s:.0f} s") from None
                time.sleep(0.2)
        yield f"127.0.0.1:{ports['native']}", process.pid
    finally:
        process.kill()
        process.wait()
