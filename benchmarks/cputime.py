"""CPU time of a process and its descendants, from /proc (Linux), for the benchmarks' per-message CPU figures."""

from __future__ import annotations

import contextlib
import os
import pathlib

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


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
