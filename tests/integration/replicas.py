"""What each broker's replica of a partition holds on disk, read with the storage library, compared with the leader.

A broker's partition directory is copied first (the broker may be running and appending), then
opened with ``PartitionLog`` (which recovers the copy: a batch torn by the copy is cut off) and
read record by record. ``assert_replica_matches`` waits until a replica holds exactly the
leader's records below the high watermark: same offsets, same keys and values.
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile
import time

from mqbroker.client import Admin, Consumer
from mqbroker.records.decoder import decode_records
from mqbroker.records.header import iter_batches
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog

#: offset → (key, value)
Records = dict[int, tuple[bytes | None, bytes | None]]


def replica_records(data_dir: pathlib.Path, topic: str, partition: int) -> Records:
    """Every record of ``data_dir``'s replica of ``topic``-``partition`` ({} if it has none)."""
    directory = data_dir / f"{topic}-{partition}"
    if not directory.exists():
        return {}
    with tempfile.TemporaryDirectory(prefix="replica-") as scratch:
        copy = pathlib.Path(scratch) / directory.name
        shutil.copytree(directory, copy)
        log = PartitionLog.open(str(copy), LogConfig(), 0, clean_shutdown=False)
        try:
            found: Records = {}
            offset = log.log_start_offset
            while offset < log.log_end_offset:
                data = log.read(offset, 1 << 20).records
                if not data:
                    break
                for position, header in iter_batches(data):
                    if not header.is_control:
                        for record in decode_records(data[position : position + header.size_bytes]):
                            found[record.offset] = (record.key, record.value)
                    offset = header.next_offset
            return found
        finally:
            log.close()


def leader_records(bootstrap: str, topic: str, partition: int, timeout_s: float = 30.0) -> tuple[Records, int, int]:
    """(records, log start, high watermark) of ``topic``-``partition`` as its leader serves them to a consumer."""
    with Admin(bootstrap) as admin:
        start = admin.list_offset(topic, partition, -2)
        high_watermark = admin.list_offset(topic, partition, -1)
    found: Records = {}
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, partition)])
        deadline = time.monotonic() + timeout_s
        while consumer.position((topic, partition)) < high_watermark:
            assert time.monotonic() < deadline, f"{topic}-{partition} not read up to {high_watermark} in time"
            for message in consumer.poll(timeout=0.5):
                found[message.offset] = (message.key, message.value)
    return {offset: record for offset, record in found.items() if offset < high_watermark}, start, high_watermark


def assert_replica_matches(data_dir: pathlib.Path, bootstrap: str, topic: str, partition: int,
                           timeout_s: float = 60.0) -> int:
    """Wait until ``data_dir``'s replica holds exactly the leader's records below the high watermark; their count."""
    expected, start, high_watermark = leader_records(bootstrap, topic, partition)
    assert set(expected) == set(range(start, high_watermark)), "the leader served a gap"
    deadline = time.monotonic() + timeout_s
    while True:
        held = replica_records(data_dir, topic, partition)
        below = {offset: record for offset, record in held.items() if start <= offset < high_watermark}
        if below == expected:
            return len(expected)
        missing = sorted(set(expected) - set(below))
        different = sorted(o for o in set(expected) & set(below) if expected[o] != below[o])
        assert not different, f"{data_dir.name} holds other records than the leader at {different[:5]}"
        assert time.monotonic() < deadline, f"{data_dir.name} lacks offsets {missing[:5]}... of {topic}-{partition}"
        time.sleep(0.2)
