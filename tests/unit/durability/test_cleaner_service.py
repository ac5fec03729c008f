"""The log cleaner service: it compacts the dirtiest compacted log in the thread pool."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor
from twisted.python.threadpool import ThreadPool

from mqbroker.durability.cleaner_service import LogCleanerService
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.decoder import decode_records
from mqbroker.records.header import iter_batches
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog


def _log(path, **settings: object) -> PartitionLog:
    config = LogConfig(segment_bytes=1024, cleanup_policy="compact", min_cleanable_dirty_ratio=0.1, **settings)
    return PartitionLog.open(str(path), config, 0)


def _append(partition_log: PartitionLog, key: bytes, value: bytes) -> None:
    builder = BatchBuilder()
    builder.append(0, key, value)
    partition_log.append(builder.build(), 0)


def _values(partition_log: PartitionLog) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of the log in offset order (a read stops at a segment's end)."""
    values: list[tuple[bytes, bytes]] = []
    offset = partition_log.log_start_offset
    while offset < partition_log.log_end_offset:
        data = partition_log.read(offset, 1 << 20).records
        for position, header in iter_batches(data):
            values += [(r.key, r.value) for r in decode_records(data[position:position + header.size_bytes])]
            offset = header.next_offset
    return values


@pytest_twisted.ensureDeferred
async def test_the_dirtiest_compacted_log_is_compacted_and_a_delete_policy_log_is_left_alone(tmp_path) -> None:
    compacted = _log(tmp_path / "compacted")
    kept = PartitionLog.open(str(tmp_path / "kept"), LogConfig(segment_bytes=1024), 0)
    for round_number in range(30):
        for key in (b"a", b"b", b"c"):
            _append(compacted, key, b"%d" % round_number * 20)
            _append(kept, key, b"%d" % round_number * 20)
    before = len(_values(kept))
    pool = ThreadPool(1, 1)
    pool.start()
    try:
        service = LogCleanerService(lambda: [kept, compacted], reactor, pool, interval_s=3600)
        assert service.dirtiest(0) is compacted
        result = await service.clean_dirtiest()
    finally:
        pool.stop()
    assert result.ran and result.records_removed > 0
    values = _values(compacted)
    assert len(values) < 90 and {key for key, _ in values} == {b"a", b"b", b"c"}
    newest = {key: value for key, value in values}  # later records win, as they do on a read
    assert newest == {key: b"29" * 20 for key in (b"a", b"b", b"c")}
    assert len(_values(kept)) == before
