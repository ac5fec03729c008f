"""A follower below its leader's log start empties its log and goes on from there."""

from __future__ import annotations

from tests.unit.storage.logtools import open_log, payload_batch, read_all


def test_truncate_fully_and_start_at_empties_the_log_at_a_later_offset(tmp_path):
    log = open_log(tmp_path)
    for tag in range(10):
        log.append(payload_batch(tag, record_count=2), now_ms=0, leader_epoch=3)
    log.flush()
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.durable_end_offset) == (500, 500, 500)
    assert log.epochs.entries == [] and read_all(log) == []
    assert log.append(payload_batch(99), now_ms=0).base_offset == 500


def test_a_log_started_later_reopens_at_its_new_start(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1, record_count=5), now_ms=0)
    log.truncate_fully_and_start_at(40)
    log.append(payload_batch(2, record_count=3), now_ms=0)
    log.flush()
    log.close()
    reopened = open_log(tmp_path)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (40, 43)
