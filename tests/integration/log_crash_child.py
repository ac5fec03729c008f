"""Child process of the crash test: append under the sync policy and report every batch made durable.

Usage: python -m tests.integration.log_crash_child DIRECTORY SEED. Prints "ready" once the log
is open, then one "durable <base offset> <tag> <record count> <value bytes>" line per batch an fsync covered.
"""

from __future__ import annotations

import random
import sys
import threading

from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog
from tests.unit.storage.logtools import payload_batch

CONFIG = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024, flush_policy="sync")


def main(directory: str, seed: int) -> None:
    """Append forever, with a flusher thread reporting what each fsync made durable."""
    chooser = random.Random(seed)
    log = PartitionLog.open(directory, CONFIG, now_ms=0)
    print("ready", flush=True)
    pending: list[tuple[int, int, int, int]] = []
    lock = threading.Lock()

    def flusher() -> None:
        while True:
            durable = log.flush()
            with lock:
                done = [entry for entry in pending if entry[0] + entry[2] <= durable]
                del pending[: len(done)]
            if done:
                print("\n".join("durable " + " ".join(map(str, entry)) for entry in done), flush=True)

    threading.Thread(target=flusher, daemon=True).start()
    while True:
        tag, count, value_bytes = chooser.randrange(2**31), chooser.randint(1, 8), chooser.choice([8, 64, 700])
        result = log.append(payload_batch(tag, record_count=count, value_bytes=value_bytes), now_ms=0)
        with lock:
            pending.append((result.base_offset, tag, count, value_bytes))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
