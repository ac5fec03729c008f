"""Partition log behaviours: offsets, reads, segments, indexes, removal of data (durability points: test_sync_state)."""

from __future__ import annotations

import os

import pytest

from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches
from mqbroker.storage.config import LogConfig
from mqbroker.storage.errors import InvalidConfigError, OffsetOutOfRangeError, RecordTooLargeError
from tests.unit.storage.logtools import SMALL_SEGMENTS, make_batch, open_log, payload_batch, read_all


def test_append_assigns_consecutive_offsets_and_stamps_them(tmp_path):
    log = open_log(tmp_path)
    first = log.append(payload_batch(1, record_count=3), now_ms=10)
    second = log.append(payload_batch(2, record_count=2), now_ms=10, leader_epoch=7)
    assert (first.base_offset, first.last_offset, second.base_offset, second.last_offset) == (0, 2, 3, 4)
    headers = [header for _, header in iter_batches(log.read(0, 1 << 20).records)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, -1), (3, 7)]
    assert log.log_end_offset == 5


def test_one_append_may_carry_several_batches(tmp_path):
    log = open_log(tmp_path)
    result = log.append(payload_batch(1, 2) + payload_batch(2, 3), now_ms=0)
    assert (result.base_offset, result.last_offset) == (0, 4)
    assert len(read_all(log)) == 2


def test_an_append_of_more_batches_than_one_pwritev_takes_is_written_whole(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=1 << 20))
    batches = [payload_batch(tag) for tag in range(700)]  # 1,400 pieces: two pwritev calls
    result = log.append(b"".join(batches), now_ms=0)
    assert (result.base_offset, result.last_offset) == (0, 699)
    stored = read_all(log)
    assert len(stored) == 700
    assert all(stored[tag][12:] == batches[tag][12:] for tag in range(700))  # only offsets were stamped
    assert [header.base_offset for batch in stored for _, header in iter_batches(batch)] == list(range(700))


def test_the_callers_buffer_is_not_modified(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(0), now_ms=0)
    buffer = bytearray(payload_batch(1))
    original = bytes(buffer)
    assert log.append(buffer, now_ms=0, leader_epoch=3).base_offset == 1
    assert buffer == original
    assert next(iter_batches(read_all(log)[1]))[1].partition_leader_epoch == 3


def test_read_returns_whole_batches_from_the_batch_holding_the_offset(tmp_path):
    log = open_log(tmp_path)
    for tag in range(50):
        log.append(payload_batch(tag, record_count=4), now_ms=0)
    data = log.read(45, max_bytes=300).records
    headers = [header for _, header in iter_batches(data)]
    assert headers[0].base_offset == 44 and len(data) <= 300
    assert all(b.next_offset == a.base_offset for b, a in zip(headers, headers[1:]))


def test_read_returns_one_batch_larger_than_max_bytes(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1, value_bytes=2000), now_ms=0)
    assert len(log.read(0, max_bytes=10).records) > 2000


@pytest.mark.parametrize("index_interval_bytes", [0, 150, 1000])
def test_reads_from_every_offset_start_at_the_batch_holding_it_whatever_the_index_holds(tmp_path, index_interval_bytes):
    log = open_log(tmp_path, LogConfig(segment_bytes=4096, index_interval_bytes=index_interval_bytes))
    batches = [log.append(payload_batch(tag, record_count=1 + tag % 3), now_ms=0) for tag in range(60)]
    for result in batches:
        for offset in range(result.base_offset, result.last_offset + 1):
            for max_bytes in (1, 500):
                headers = [header for _, header in iter_batches(log.read(offset, max_bytes).records)]
                assert headers[0].base_offset == result.base_offset
                assert all(b.next_offset == a.base_offset for b, a in zip(headers, headers[1:]))
                assert len(headers) == 1 or sum(h.size_bytes for h in headers) <= max_bytes


def test_read_never_passes_max_offset(tmp_path):
    log = open_log(tmp_path)
    for tag in range(10):
        log.append(payload_batch(tag, record_count=2), now_ms=0)
    bases: list[int] = []
    offset = 0
    while data := log.read(offset, 1 << 20, max_offset=6).records:
        headers = [header for _, header in iter_batches(data)]
        bases += [header.base_offset for header in headers]
        offset = headers[-1].next_offset
    assert bases == [0, 2, 4]
    assert log.read(6, 1 << 20, max_offset=6).records == b""


@pytest.mark.parametrize("index_interval_bytes", [0, 150, 1000])
def test_a_read_up_to_a_batch_start_below_the_log_end_returns_every_batch_below_it(tmp_path, index_interval_bytes):
    # A consumer at the high watermark while later batches wait for their fsync: one read brings all it may see.
    log = open_log(tmp_path, LogConfig(segment_bytes=1 << 20, index_interval_bytes=index_interval_bytes))
    results = [log.append(payload_batch(tag, record_count=1 + tag % 3), now_ms=0) for tag in range(40)]
    for start in results[:30]:
        for end in results[31:39]:
            data = log.read(start.base_offset, 1 << 20, max_offset=end.base_offset).records
            headers = [header for _, header in iter_batches(data)]
            assert (headers[0].base_offset, headers[-1].next_offset) == (start.base_offset, end.base_offset)


def test_read_outside_the_log_is_out_of_range(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1), now_ms=0)
    assert log.read(1, 100).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)


def test_segments_roll_by_size_and_are_named_by_base_offset(tmp_path):
    log = open_log(tmp_path)
    for tag in range(100):
        log.append(payload_batch(tag), now_ms=0)
    bases = log.segment_bases()
    assert len(bases) >= 3 and bases[0] == 0
    names = sorted(name for name in os.listdir(tmp_path) if name.endswith(".log"))
    assert names == [f"{base:020d}.log" for base in bases]
    assert all(os.path.getsize(tmp_path / name) <= SMALL_SEGMENTS.segment_bytes for name in names)
    assert len(read_all(log)) == 100


def test_segments_roll_by_age(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_ms=1000))
    log.append(payload_batch(1), now_ms=0)
    log.append(payload_batch(2), now_ms=500)
    log.append(payload_batch(3), now_ms=1001)
    assert log.segment_bases() == [0, 2]


def test_explicit_roll_starts_a_segment_at_the_log_end(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1, 3), now_ms=0)
    log.roll(now_ms=0)
    log.roll(now_ms=0)
    assert log.segment_bases() == [0, 3]


def test_offset_for_timestamp_finds_the_first_batch_at_or_after_it(tmp_path):
    log = open_log(tmp_path)
    for tag in range(60):
        log.append(payload_batch(tag, record_count=2, timestamp_ms=1000 + 10 * tag), now_ms=0)
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(1000 + 10 * 37) == 74
    assert log.offset_for_timestamp(1000 + 10 * 37 - 5) == 74
    assert log.offset_for_timestamp(10**12) is None


def test_largest_timestamp_names_the_first_batch_holding_it_across_segments(tmp_path):
    log = open_log(tmp_path)
    assert log.largest_timestamp() is None
    for tag, timestamp_ms in enumerate((1000, 5000, 3000)):
        log.append(payload_batch(tag, record_count=2, timestamp_ms=timestamp_ms), now_ms=0)
        log.roll(now_ms=0)
    log.append(payload_batch(3, record_count=2, timestamp_ms=5000), now_ms=0)  # a tie, later: not chosen
    assert log.largest_timestamp() == (5000, 2)


def test_invalid_batches_are_rejected_and_nothing_is_written(tmp_path):
    log = open_log(tmp_path)
    good = payload_batch(1)
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append(good + bytes(flipped), now_ms=0)
    with pytest.raises(CorruptRecordError):
        log.append(good[:-3], now_ms=0)
    with pytest.raises(CorruptRecordError):
        log.append(b"", now_ms=0)
    assert log.log_end_offset == 0 and os.path.getsize(tmp_path / f"{0:020d}.log") == 0


def test_batches_above_max_message_bytes_are_rejected(tmp_path):
    log = open_log(tmp_path, LogConfig(max_message_bytes=500))
    with pytest.raises(RecordTooLargeError):
        log.append(payload_batch(1, value_bytes=600), now_ms=0)


def test_truncate_removes_the_batch_holding_the_offset_and_everything_after(tmp_path):
    log = open_log(tmp_path)
    for tag in range(100):
        log.append(payload_batch(tag, record_count=2), now_ms=0)
    log.flush()
    log.truncate_to(101)
    assert log.log_end_offset == 100 and log.durable_end_offset == 100
    assert all(base < 100 for base in log.segment_bases())
    result = log.append(payload_batch(999), now_ms=0)
    assert result.base_offset == 100
    assert len(read_all(log)) == 51


def test_truncate_below_the_first_segment_empties_the_log(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1, 5), now_ms=0)
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.append(payload_batch(2), now_ms=0).base_offset == 0


def test_delete_records_before_advances_the_start_and_drops_whole_segments(tmp_path):
    log = open_log(tmp_path)
    for tag in range(100):
        log.append(payload_batch(tag), now_ms=0)
    bases = log.segment_bases()
    assert log.delete_records_before(bases[2] + 1) == bases[2] + 1
    assert log.segment_bases()[0] == bases[2]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(bases[2], 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(101)


def test_clean_reopen_keeps_offsets_and_data(tmp_path):
    log = open_log(tmp_path)
    batches = [payload_batch(tag, record_count=2) for tag in range(80)]
    for batch in batches:
        log.append(batch, now_ms=0)
    expected = read_all(log)
    log.close()
    reopened = open_log(tmp_path, clean_shutdown=True)
    assert reopened.log_end_offset == 160 and reopened.durable_end_offset == 160
    assert read_all(reopened) == expected
    assert reopened.append(payload_batch(81), now_ms=0).base_offset == 160


def test_config_from_mapping_reads_kafka_keys_and_names_bad_ones():
    config = LogConfig.from_mapping({"segment.bytes": "2048", "cleanup.policy": "compact", "flush.policy": "interval"})
    assert (config.segment_bytes, config.cleanup_policy, config.flush_policy) == (2048, "compact", "interval")
    assert LogConfig.from_mapping(config.to_mapping()) == config
    with pytest.raises(InvalidConfigError, match="segment.bites"):
        LogConfig.from_mapping({"segment.bites": 1})
    with pytest.raises(InvalidConfigError, match="retention.ms"):
        LogConfig.from_mapping({"retention.ms": "soon"})
    with pytest.raises(InvalidConfigError, match="cleanup.policy"):
        LogConfig.from_mapping({"cleanup.policy": "shred"})
    with pytest.raises(InvalidConfigError, match="segment.bytes"):
        LogConfig.from_mapping({"segment.bytes": 0})


def test_keyed_batches_round_trip(tmp_path):
    log = open_log(tmp_path)
    batch = make_batch([b"v1", None], keys=[b"k", b"k"])  # type: ignore[list-item]
    log.append(batch, now_ms=0)
    assert read_all(log)[0][61:] == batch[61:]
