"""``cpu_affinity``: keep every thread of the broker on the CPUs an operator chose.

The broker runs one Python interpreter: its reactor thread and background pool (and its
fsync thread, where Linux AIO is missing) take turns holding the interpreter lock. Each
hand-over between threads on different CPUs wakes the other CPU first; on a small virtual
machine that wake-up costs more than the work handed over. With the thread fsync engine,
pinning the broker to one CPU (and the clients to another) cut the 5,000 msg/s end-to-end
latency by about a sixth on the 2-core development machine; with the default Linux AIO
engine it no longer helps there (docs/operations.md).
"""

from __future__ import annotations

import os


def parse_cpu_list(text: str) -> frozenset[int]:
    """The CPUs of a Linux CPU list (``"0"``, ``"0,2"``, ``"1-3"``); ValueError names what is wrong."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, separator, last = part.strip().partition("-")
        if not first.isdigit() or (separator and not last.isdigit()):
            raise ValueError(f"{part.strip()!r} is not a CPU number or range like 0 or 2-3")
        low, high = int(first), int(last) if separator else int(first)
        if high < low:
            raise ValueError(f"the range {part.strip()!r} runs backwards")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def unavailable_cpus(cpus: frozenset[int]) -> list[int]:
    """The CPUs of ``cpus`` this process may not run on (none: it can be pinned there)."""
    return sorted(cpus - os.sched_getaffinity(0))


def pin_all_threads(cpus: frozenset[int]) -> None:
    """Restrict every thread of this process, and those it starts later, to ``cpus``."""
    for thread_id in os.listdir("/proc/self/task"):  # threads already running; new ones inherit the mask
        os.sched_setaffinity(int(thread_id), cpus)
