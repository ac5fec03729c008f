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
