"""Producer snapshots: the newest few are kept, a truncation removes those past it, a damaged one costs a replay."""

from __future__ import annotations

import random

from mqbroker.storage.producer_snapshots import SNAPSHOTS_KEPT, snapshot_offsets
from tests.powerloss import power_loss_disks
from tests.unit.storage.logtools import make_batch, open_log


def _idempotent_batch(sequence: int) -> bytes:
    return make_batch([b"a"], producer_id=5, producer_epoch=0, base_sequence=sequence)


def test_only_the_newest_snapshots_are_kept(tmp_path):
    log = open_log(tmp_path)
    appends = SNAPSHOTS_KEPT + 3
    for sequence in range(appends):
        log.append(_idempotent_batch(sequence), now_ms=0)
        log.snapshot_producers()  # one snapshot per log end: 1, 2, ... appends
    assert snapshot_offsets(str(tmp_path)) == list(range(appends - SNAPSHOTS_KEPT + 1, appends + 1))


def test_an_unchanged_table_is_not_snapshotted_again(tmp_path):
    log = open_log(tmp_path)
    log.append(_idempotent_batch(0), now_ms=0)
    log.snapshot_producers()
    (tmp_path / "00000000000000000001.snapshot").unlink()
    log.snapshot_producers()
    assert snapshot_offsets(str(tmp_path)) == []


def test_a_truncation_removes_the_snapshots_past_it(tmp_path):
    log = open_log(tmp_path)
    for sequence in range(3):
        log.append(_idempotent_batch(sequence), now_ms=0)
        log.snapshot_producers()
    log.truncate_to(2)
    assert snapshot_offsets(str(tmp_path)) == [2]
    retry = log.append(_idempotent_batch(1), now_ms=0)
    assert retry.duplicate and retry.base_offset == 1


def test_a_damaged_producer_snapshot_falls_back_to_replaying_the_log(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch([b"a"], producer_id=5, producer_epoch=0, base_sequence=0), now_ms=0)
    log.close()
    snapshot = next(tmp_path.glob("*.snapshot"))
    snapshot.write_bytes(snapshot.read_bytes()[:-3])
    reopened = open_log(tmp_path, clean_shutdown=True)
    retry = reopened.append(make_batch([b"a"], producer_id=5, producer_epoch=0, base_sequence=0), now_ms=0)
    assert retry.duplicate


def test_a_snapshot_past_a_tail_lost_to_a_power_loss_is_not_used_when_the_log_grows_back(tmp_path):
    directory = str(tmp_path)
    with power_loss_disks(directory) as (disk,):
        log = open_log(directory)
        log.append(_idempotent_batch(0), now_ms=0)
        log.flush()
        log.append(_idempotent_batch(1), now_ms=0)  # never flushed: the producer gets no acknowledgement
        log.snapshot_producers()  # at offset 2, durable, describing the batch the power loss takes
        disk.crash(random.Random(0), lose_everything=True)
        log = open_log(directory)
        assert log.log_end_offset == 1
        for _ in range(2):
            log.append(make_batch([b"another producer"]), now_ms=0)  # the log grows back past offset 2
        log.flush()
        disk.crash(random.Random(0), lose_everything=True)
        log = open_log(directory)
        retry = log.append(_idempotent_batch(1), now_ms=0)  # the producer retries what was never acknowledged
    assert not retry.duplicate and retry.base_offset == 3
