"""Idempotent producers: retries answered with their original offsets, gaps and fenced epochs refused."""

from __future__ import annotations

import pytest

from mqbroker.storage.config import LogConfig
from mqbroker.storage.errors import DuplicateSequenceError, InvalidProducerEpochError, OutOfOrderSequenceError
from mqbroker.storage.manager import LogManager
from tests.unit.storage.logtools import make_batch, open_log, read_all

PRODUCER = 4242


def producer_batch(sequence: int, count: int = 2, epoch: int = 0, producer_id: int = PRODUCER) -> bytes:
    values = [f"{producer_id}-{epoch}-{sequence + n}".encode() for n in range(count)]
    return make_batch(values, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


def test_a_retried_batch_is_not_written_again_and_gets_its_original_offsets(tmp_path):
    log = open_log(tmp_path)
    first = log.append(producer_batch(0), now_ms=0)
    log.append(producer_batch(2), now_ms=0)
    retry = log.append(producer_batch(0), now_ms=0)
    assert retry.duplicate and (retry.base_offset, retry.last_offset) == (first.base_offset, first.last_offset)
    assert log.log_end_offset == 4 and len(read_all(log)) == 2


def test_only_the_last_five_batches_are_remembered(tmp_path):
    log = open_log(tmp_path)
    for batch in range(7):
        log.append(producer_batch(2 * batch), now_ms=0)
    assert log.append(producer_batch(4), now_ms=0).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append(producer_batch(2), now_ms=0)


def test_a_sequence_gap_is_out_of_order(tmp_path):
    log = open_log(tmp_path)
    log.append(producer_batch(0), now_ms=0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(producer_batch(3), now_ms=0)
    assert log.log_end_offset == 2


def test_an_older_epoch_is_fenced_and_a_new_epoch_starts_at_zero(tmp_path):
    log = open_log(tmp_path)
    log.append(producer_batch(0, epoch=3), now_ms=0)
    with pytest.raises(InvalidProducerEpochError):
        log.append(producer_batch(2, epoch=2), now_ms=0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(producer_batch(5, epoch=4), now_ms=0)
    assert log.append(producer_batch(0, epoch=4), now_ms=0).base_offset == 2


def test_unknown_producers_may_start_at_any_sequence(tmp_path):
    log = open_log(tmp_path)
    assert not log.append(producer_batch(1000), now_ms=0).duplicate
    assert not log.append(producer_batch(0, producer_id=7), now_ms=0).duplicate


def test_producers_are_tracked_independently(tmp_path):
    log = open_log(tmp_path)
    log.append(producer_batch(0, producer_id=1), now_ms=0)
    log.append(producer_batch(0, producer_id=2), now_ms=0)
    assert log.append(producer_batch(0, producer_id=1), now_ms=0).base_offset == 0
    assert log.append(producer_batch(0, producer_id=2), now_ms=0).base_offset == 2


def test_a_retry_inside_a_multi_batch_append_is_refused(tmp_path):
    log = open_log(tmp_path)
    log.append(producer_batch(0), now_ms=0)
    with pytest.raises(DuplicateSequenceError):
        log.append(producer_batch(2) + producer_batch(0), now_ms=0)
    assert log.log_end_offset == 2


def test_batches_of_one_append_are_checked_in_order(tmp_path):
    log = open_log(tmp_path)
    result = log.append(producer_batch(0) + producer_batch(2), now_ms=0)
    assert result.last_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        log.append(producer_batch(4) + producer_batch(7), now_ms=0)
    assert log.log_end_offset == 4


@pytest.mark.parametrize("clean", [True, False])
def test_producer_state_survives_a_restart(tmp_path, clean):
    log = open_log(tmp_path)
    for batch in range(3):
        log.append(producer_batch(2 * batch), now_ms=0)
    log.snapshot_producers()
    log.append(producer_batch(6), now_ms=0)  # after the snapshot: replayed from the log's headers
    if clean:
        log.close()
    reopened = open_log(tmp_path, clean_shutdown=clean)
    assert reopened.append(producer_batch(6), now_ms=0).base_offset == 6
    assert reopened.append(producer_batch(2), now_ms=0).base_offset == 2
    with pytest.raises(OutOfOrderSequenceError):
        reopened.append(producer_batch(10), now_ms=0)


def test_truncation_rewinds_producer_state(tmp_path):
    log = open_log(tmp_path)
    log.append(producer_batch(0), now_ms=0)
    log.snapshot_producers()
    log.append(producer_batch(2), now_ms=0)
    log.truncate_to(2)
    assert not log.append(producer_batch(2), now_ms=0).duplicate
    assert log.log_end_offset == 4


def timed_batch(sequence: int, timestamp_ms: int, producer_id: int = PRODUCER) -> bytes:
    return make_batch(
        [b"x"], timestamp_ms=timestamp_ms, producer_id=producer_id, producer_epoch=0, base_sequence=sequence
    )


def test_an_idle_producer_expires_and_then_starts_afresh(tmp_path):
    log = open_log(tmp_path)
    log.append(timed_batch(0, timestamp_ms=1_000), now_ms=0)
    log.append(timed_batch(0, timestamp_ms=5_000, producer_id=9), now_ms=0)
    assert log.expire_producers(now_ms=10_999, expiration_ms=10_000) == 0
    assert log.append(timed_batch(0, timestamp_ms=1_000), now_ms=0).duplicate
    assert log.expire_producers(now_ms=11_000, expiration_ms=10_000) == 1
    assert not log.append(timed_batch(0, timestamp_ms=1_000), now_ms=0).duplicate  # forgotten: written again
    assert log.append(timed_batch(0, timestamp_ms=5_000, producer_id=9), now_ms=0).duplicate
    assert log.expire_producers(now_ms=15_000, expiration_ms=10_000) == 2  # 4242 wrote at 1_000 again
    assert not log.append(timed_batch(77, timestamp_ms=15_000, producer_id=9), now_ms=0).duplicate  # any sequence


def test_a_producer_writing_again_is_not_expired(tmp_path):
    log = open_log(tmp_path)
    log.append(timed_batch(0, timestamp_ms=1_000), now_ms=0)
    log.append(timed_batch(1, timestamp_ms=9_000), now_ms=0)
    assert log.expire_producers(now_ms=11_000, expiration_ms=10_000) == 0
    assert log.append(timed_batch(1, timestamp_ms=9_000), now_ms=0).duplicate


def test_last_timestamps_survive_a_snapshot_and_expiry_survives_a_clean_restart(tmp_path):
    log = open_log(tmp_path)
    log.append(timed_batch(0, timestamp_ms=1_000), now_ms=0)
    log.append(timed_batch(0, timestamp_ms=8_000, producer_id=9), now_ms=0)
    log.close()
    reopened = open_log(tmp_path, clean_shutdown=True)
    assert reopened.expire_producers(now_ms=11_000, expiration_ms=10_000) == 1
    reopened.close()
    again = open_log(tmp_path, clean_shutdown=True)
    assert not again.append(timed_batch(0, timestamp_ms=1_000), now_ms=0).duplicate
    assert again.append(timed_batch(0, timestamp_ms=8_000, producer_id=9), now_ms=0).duplicate


def test_the_log_manager_expires_producers_in_every_partition(tmp_path):
    manager = LogManager(str(tmp_path), LogConfig())
    for partition in range(3):
        manager.create("orders", partition).append(timed_batch(0, timestamp_ms=partition * 1_000), now_ms=0)
    assert manager.expire_producers(now_ms=11_500, expiration_ms=10_000) == 2
    assert manager.get("orders", 2).append(timed_batch(0, timestamp_ms=2_000), now_ms=0).duplicate
    manager.close()
