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

from mqbroker.storage import cleaner, fs
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog
from tests.unit.storage.logtools import make_batch

CONFIG = LogConfig(
    segment_bytes=4096,
    index_interval_bytes=512,
    cleanup_policy="compact",
    delete_retention_ms=10**12,  # tombstones stay: every key's newest record must survive
    flush_policy="sync",
)
KEYS = [f"key-{number}".encode() for number in range(8)]
BATCHES_PER_ROUND = 12


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


def main(directory: str, seed: int, kill_at_rename: int) -> None:
    """Append, report what is durable, roll and compact until killed."""
    chooser = random.Random(seed)
    log = PartitionLog.open(directory, CONFIG, now_ms=0)
    if kill_at_rename:
        die_at_rename(kill_at_rename, after=chooser.random() < 0.5)
    print("ready", flush=True)
    serial = 0
    while True:
        for _ in range(BATCHES_PER_ROUND):
            keys = [chooser.choice(KEYS) for _ in range(chooser.randint(1, 3))]
            values = []
            for key in keys:
                serial += 1
                values.append(None if chooser.random() < 0.1 else b"%s:%d:%d" % (key, seed, serial))
            result = log.append(make_batch(values, keys=keys), now_ms=0)
            log.flush()
            lines = [
                f"durable {result.base_offset + slot} {key.decode()} {value.decode() if value else '-'}"
                for slot, (key, value) in enumerate(zip(keys, values))
            ]
            print("\n".join(lines), flush=True)
        log.roll(now_ms=0)
        print("cleaning", flush=True)
        cleaner.clean(log, now_ms=10**6, force=True)
        print("cleaned", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
