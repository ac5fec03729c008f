"""Child process of the compaction crash test: append keyed records, roll, compact, forever.

Usage: python -m tests.integration.log_compaction_crash_child DIRECTORY SEED KILL_AT_RENAME.
Prints "durable <offset> <key> <value or ->" for every record an fsync covered, "cleaning" before
and "cleaned" after each compaction pass. With KILL_AT_RENAME > 0 the process SIGKILLs itself
at that rename of the pass (just before or just after it, as the seed decides), so some kills
land exactly in the swap; the parent also kills it at random moments.
"""

from __future__ import annotations

import os
import random
import signal
import sys

from mqbroker.storage import fs
from mqbroker.storage.log import PartitionLog
from tests.unit.storage.compaction_workload import CONFIG, CompactionWorkload, DurableRecord


def die_at_rename(rename_number: int, after: bool) -> None:
    """Make the ``rename_number``-th `fs.replace` of this process kill it, before or after renaming."""
    real_replace, calls = fs.replace, []

    def replace(source: str, target: str) -> None:
        calls.append(source)
        if len(calls) == rename_number and not after:
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(source, target)
        if len(calls) == rename_number:
            os.kill(os.getpid(), signal.SIGKILL)

    fs.replace = replace


def report(records: list[DurableRecord]) -> None:
    """One "durable" line per record an fsync covered."""
    lines = [f"durable {offset} {key.decode()} {value.decode() if value else '-'}" for offset, key, value in records]
    print("\n".join(lines), flush=True)


def main(directory: str, seed: int, kill_at_rename: int) -> None:
    """Append, report what is durable, roll and compact until killed."""
    log = PartitionLog.open(directory, CONFIG, now_ms=0)
    workload = CompactionWorkload(log, seed)
    if kill_at_rename:
        die_at_rename(kill_at_rename, after=random.Random(seed).random() < 0.5)
    print("ready", flush=True)
    while True:
        workload.round(report, lambda progress: print(progress, flush=True))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
