"""Retention: whole old segments go by time or size, never the active one, never past the high watermark."""

from __future__ import annotations

import os

import pytest

from mqbroker.storage.config import LogConfig
from mqbroker.storage.errors import InvalidConfigError
from tests.unit.storage.logtools import open_log, payload_batch


def test_retention_by_time_deletes_old_sealed_segments_only(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=4096, retention_ms=1000))
    for tag in range(100):
        log.append(payload_batch(tag, timestamp_ms=tag * 100), now_ms=0)
    before = log.segment_bases()
    deleted = log.apply_retention(now_ms=5000)
    assert deleted > 0 and log.segment_bases() == before[deleted:]
    assert log.log_start_offset == before[deleted]
    assert log.apply_retention(now_ms=10**9) == len(before) - deleted - 1
    assert len(log.segment_bases()) == 1


def test_retention_by_size_keeps_the_partition_under_the_limit(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=4096, retention_bytes=10_000, retention_ms=-1))
    for tag in range(200):
        log.append(payload_batch(tag), now_ms=0)
    log.apply_retention(now_ms=0)
    sizes = [os.path.getsize(tmp_path / f"{base:020d}.log") for base in log.segment_bases()]
    assert sum(sizes) - sizes[0] < 10_000 <= sum(sizes) or len(sizes) == 1


@pytest.mark.parametrize("high_watermark_segment", [0, 1, 3])
def test_retention_never_deletes_a_segment_holding_offsets_at_or_above_the_bound(tmp_path, high_watermark_segment):
    log = open_log(tmp_path, LogConfig(segment_bytes=4096, retention_ms=0))
    for tag in range(300):
        log.append(payload_batch(tag), now_ms=0)
    bases = log.segment_bases()
    assert len(bases) > 5
    high_watermark = bases[high_watermark_segment] + 1  # inside that segment
    deleted = log.apply_retention(now_ms=10**9, max_offset=high_watermark)
    assert deleted == high_watermark_segment and log.segment_bases()[0] == bases[high_watermark_segment]
    assert log.apply_retention(now_ms=10**9, max_offset=bases[high_watermark_segment + 1]) == 1
    assert log.apply_retention(now_ms=10**9, max_offset=None) == len(bases) - high_watermark_segment - 2


def test_compacted_only_topics_keep_old_segments(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=4096, retention_ms=0, cleanup_policy="compact"))
    for tag in range(100):
        log.append(payload_batch(tag), now_ms=0)
    assert log.apply_retention(now_ms=10**9) == 0


def test_an_empty_cleanup_policy_neither_deletes_nor_compacts_and_both_orders_mean_both():
    assert (LogConfig(cleanup_policy="").deletes, LogConfig(cleanup_policy="").compacts) == (False, False)
    assert LogConfig(cleanup_policy="delete,compact").compacts and LogConfig(cleanup_policy="delete,compact").deletes
    with pytest.raises(InvalidConfigError):
        LogConfig(cleanup_policy="delete,delete")


def test_an_empty_cleanup_policy_keeps_old_segments(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=4096, retention_ms=0, cleanup_policy=""))
    for tag in range(100):
        log.append(payload_batch(tag), now_ms=0)
    assert log.apply_retention(now_ms=10**9) == 0


def _names(directory, suffix):
    return sorted(name for name in os.listdir(directory) if name.endswith(suffix))


def test_files_let_go_stay_renamed_deleted_for_file_delete_delay_ms(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=4096, retention_ms=1000, file_delete_delay_ms=60_000))
    for tag in range(100):
        log.append(payload_batch(tag, timestamp_ms=tag * 100), now_ms=0)
    before = log.segment_bases()
    deleted = log.apply_retention(now_ms=5000)
    assert deleted > 0 and _names(tmp_path, ".log") == [f"{base:020d}.log" for base in before[deleted:]]
    retired = [f"{base:020d}.log.deleted" for base in before[:deleted]]
    assert _names(tmp_path, ".log.deleted") == retired
    assert log.read(log.log_start_offset, 4096).records  # what is kept still reads
    log.reconfigure(LogConfig(segment_bytes=4096, retention_ms=-1, file_delete_delay_ms=60_000))  # no more go
    log.apply_retention(now_ms=5000 + 59_999)
    assert _names(tmp_path, ".log.deleted") == retired
    log.apply_retention(now_ms=5000 + 60_000)
    assert _names(tmp_path, ".deleted") == []


def test_delete_records_times_its_files_from_the_next_retention_pass_and_a_zero_delay_removes_at_once(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=4096, retention_ms=-1, file_delete_delay_ms=1000))
    for tag in range(100):
        log.append(payload_batch(tag), now_ms=0)
    second = log.segment_bases()[1]
    log.delete_records_before(second)
    assert _names(tmp_path, ".log.deleted") == [f"{0:020d}.log.deleted"]
    log.apply_retention(now_ms=10**9)  # starts the delay
    assert _names(tmp_path, ".log.deleted") == [f"{0:020d}.log.deleted"]
    log.apply_retention(now_ms=10**9 + 1000)
    assert _names(tmp_path, ".deleted") == []
    log.reconfigure(LogConfig(segment_bytes=4096, retention_ms=-1, file_delete_delay_ms=0))
    log.delete_records_before(log.segment_bases()[1])
    assert _names(tmp_path, ".deleted") == [] and len(_names(tmp_path, ".log")) == len(log.segment_bases())


def test_closing_a_log_removes_the_files_still_waiting(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=4096, retention_ms=-1))
    for tag in range(100):
        log.append(payload_batch(tag), now_ms=0)
    log.delete_records_before(log.segment_bases()[2])
    assert _names(tmp_path, ".deleted")
    log.close()
    assert _names(tmp_path, ".deleted") == []
    assert open_log(tmp_path, LogConfig(segment_bytes=4096)).log_start_offset > 0


def test_file_delete_delay_ms_is_a_log_setting_of_at_least_zero():
    assert LogConfig.from_mapping({"file.delete.delay.ms": "12345"}).file_delete_delay_ms == 12345
    assert LogConfig().to_mapping()["file.delete.delay.ms"] == 60_000
    with pytest.raises(InvalidConfigError):
        LogConfig.from_mapping({"file.delete.delay.ms": "-1"})
