"""Keyed appends, rolls and forced compaction passes, and the check a crash must pass: for the compaction crash tests.

The same workload runs in a child process killed with SIGKILL
(``tests/integration/log_compaction_crash_child.py``) and in-process on the power-loss file
system (``test_cleaner_power_loss``). ``check_log`` asserts what compaction promises through any
crash: the log opens and reads (CRCs checked), offsets ascend, every record is one that was
written, and no key's newest durable record is lost.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from mqbroker.records.decoder import decode_records
from mqbroker.storage import cleaner
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog
from tests.unit.storage.logtools import make_batch, read_all

CONFIG = LogConfig(
    segment_bytes=4096,
    index_interval_bytes=512,
    cleanup_policy="compact",
    delete_retention_ms=10**12,  # tombstones stay: every key's newest record must survive
    flush_policy="sync",
)
KEYS = [f"key-{number}".encode() for number in range(8)]
BATCHES_PER_ROUND = 12

#: (offset, key, value or None for a tombstone) of a record an fsync covered.
DurableRecord = tuple[int, bytes, bytes | None]


class CompactionWorkload:
    """Appends keyed batches (each flushed, then reported durable), rolls and compacts, round after round."""

    def __init__(self, log: PartitionLog, seed: int, serial: int = 0) -> None:
        self.log = log
        self.seed = seed
        self.chooser = random.Random(seed)
        #: Numbers every value, so a value names the one write it came from.
        self.serial = serial

    def round(self, on_durable: Callable[[list[DurableRecord]], None], on_progress: Callable[[str], None]) -> None:
        """``BATCHES_PER_ROUND`` flushed appends, a roll, then a forced compaction pass."""
        for _ in range(BATCHES_PER_ROUND):
            keys = [self.chooser.choice(KEYS) for _ in range(self.chooser.randint(1, 3))]
            values: list[bytes | None] = []
            for key in keys:
                self.serial += 1
                values.append(None if self.chooser.random() < 0.1 else b"%s:%d:%d" % (key, self.seed, self.serial))
            result = self.log.append(make_batch(values, keys=keys), now_ms=0)
            self.log.flush()
            on_durable([(result.base_offset + slot, key, value) for slot, (key, value) in enumerate(zip(keys, values))])
        self.log.roll(now_ms=0)
        on_progress("cleaning")
        cleaner.clean(self.log, now_ms=10**6, force=True)
        on_progress("cleaned")


def check_log(directory: str, newest_durable: dict[bytes, tuple[int, bytes | None]]) -> None:
    """Readable (CRCs checked), offsets ascending, only written records, no key's newest durable record lost."""
    log = PartitionLog.open(directory, CONFIG, now_ms=0)
    stored = [record for batch in read_all(log) for record in decode_records(batch)]
    log.close()
    offsets = [record.offset for record in stored]
    assert offsets == sorted(set(offsets))
    assert all(record.value is None or record.value.startswith(record.key + b":") for record in stored)
    newest_stored = {record.key: (record.offset, record.value) for record in stored}
    for key, (offset, value) in newest_durable.items():
        assert key in newest_stored, f"every record of {key!r} is gone (newest durable at {offset})"
        stored_offset, stored_value = newest_stored[key]
        assert stored_offset >= offset, f"{key!r}: newest durable record at {offset} lost"
        assert stored_offset > offset or stored_value == value, f"{key!r}: record at {offset} changed"
