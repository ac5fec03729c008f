"""The leader-epoch cache: start offsets per epoch, persisted atomically off the append path, rebuilt by recovery, cut with the log."""

from __future__ import annotations

import pathlib
import random

import pytest

from mqbroker.records.builder import encode_batch
from mqbroker.records.record import Record
from mqbroker.storage.config import LogConfig
from mqbroker.storage.epochs import EPOCH_CHECKPOINT_FILE, UNDEFINED_EPOCH, EpochEntry, LeaderEpochCache
from mqbroker.storage.errors import CorruptFileError
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.manager import LogManager
from tests.powerloss import power_loss_disks
from tests.unit.storage.logtools import SMALL_SEGMENTS, payload_batch


def _batch(count: int = 1, leader_epoch: int = -1, base_offset: int = 0) -> bytes:
    batch = [Record(offset=base_offset + n, timestamp_ms=0, key=None, value=b"v%d" % n) for n in range(count)]
    return encode_batch(batch, base_offset=base_offset, partition_leader_epoch=leader_epoch)


def test_end_of_an_epoch_is_the_start_of_the_next_or_the_log_end(tmp_path: pathlib.Path) -> None:
    cache = LeaderEpochCache.load(str(tmp_path))
    assert cache.end_offset_for(3, 10) == (UNDEFINED_EPOCH, 10)
    cache.assign(1, 0)
    cache.assign(3, 5)
    assert cache.end_offset_for(1, 12) == (1, 5)
    assert cache.end_offset_for(2, 12) == (1, 5)  # unknown epoch: the largest known below it
    assert cache.end_offset_for(3, 12) == (3, 12)
    assert cache.end_offset_for(7, 12) == (3, 12)
    assert cache.end_offset_for(0, 12) == (UNDEFINED_EPOCH, 0)


def test_cache_survives_reopening_and_truncation_is_persisted(tmp_path: pathlib.Path) -> None:
    cache = LeaderEpochCache.load(str(tmp_path))
    assert cache.assign(0, 0) and cache.assign(2, 4) and cache.assign(5, 9)
    assert not cache.assign(2, 11)  # an older epoch is not news
    cache.truncate_from_end(9)
    assert LeaderEpochCache.load(str(tmp_path)).entries == [EpochEntry(epoch=0, start_offset=0), EpochEntry(epoch=2, start_offset=4)]


def test_an_epoch_that_wrote_nothing_is_replaced_by_the_next(tmp_path: pathlib.Path) -> None:
    cache = LeaderEpochCache.load(str(tmp_path))
    cache.assign(1, 3)
    cache.assign(2, 3)
    assert cache.entries == [EpochEntry(epoch=2, start_offset=3)]


def test_malformed_checkpoint_is_a_typed_error(tmp_path: pathlib.Path) -> None:
    (tmp_path / EPOCH_CHECKPOINT_FILE).write_bytes(b"0\n2\n1 0\n")
    with pytest.raises(CorruptFileError):
        LeaderEpochCache.load(str(tmp_path))


def test_leader_appends_record_their_epoch_and_truncation_forgets_it(tmp_path: pathlib.Path) -> None:
    log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0)
    log.append(_batch(2), 0, leader_epoch=0)
    log.append(_batch(3), 0, leader_epoch=4)
    assert log.epochs.entries == [EpochEntry(epoch=0, start_offset=0), EpochEntry(epoch=4, start_offset=2)]
    log.truncate_to(2)
    assert log.epochs.latest_epoch == 0
    log.close()
    assert PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0, clean_shutdown=True).epochs.latest_epoch == 0


def test_follower_appends_take_epochs_from_the_batches(tmp_path: pathlib.Path) -> None:
    log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0)
    copied = _batch(2, leader_epoch=1, base_offset=0) + _batch(1, leader_epoch=3, base_offset=2)
    log.append(copied, 0, assign_offsets=False)
    assert log.epochs.entries == [EpochEntry(epoch=1, start_offset=0), EpochEntry(epoch=3, start_offset=2)]
    assert log.log_end_offset == 3


@pytest.mark.parametrize("cut", [2, 0], ids=["inside-the-log", "everything"])
def test_a_truncation_is_durable_before_the_cache_forgets_its_epochs(tmp_path: pathlib.Path, cut: int) -> None:
    with power_loss_disks(str(tmp_path)) as (disk,):
        log = PartitionLog.open(str(tmp_path), LogConfig(), 0)
        log.append(_batch(2), 0, leader_epoch=0)
        log.append(_batch(3), 0, leader_epoch=4)
        log.flush()
        log.truncate_to(cut)  # a follower cuts back to its new leader's log
        disk.crash(random.Random(0), lose_everything=True)
        recovered = PartitionLog.open(str(tmp_path), LogConfig(), 0)
    assert recovered.log_end_offset == cut
    assert [entry.epoch for entry in recovered.epochs.entries] == ([0] if cut else [])


def test_a_leadership_first_append_fsyncs_nothing_and_the_checkpoint_writes_its_epoch(tmp_path: pathlib.Path) -> None:
    with power_loss_disks(str(tmp_path)) as (disk,):
        log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0)
        log.append(_batch(2), 0, leader_epoch=0)
        log.persist_epochs()
        log.start_leader_epoch(3)
        assert log.epochs.entries == [EpochEntry(epoch=0, start_offset=0), EpochEntry(epoch=3, start_offset=2)]
        fsyncs = disk.fsyncs
        log.append(_batch(1), 0, leader_epoch=3)  # on the reactor in a broker: it must not wait for the disk
        assert disk.fsyncs == fsyncs
        assert LeaderEpochCache.load(log.directory).entries == [EpochEntry(epoch=0, start_offset=0)]
        assert log.recovery_point == 0  # the durable end (nothing flushed yet), and never past epoch 3's start
        log.flush()
        assert log.recovery_point == 2  # durable to 3, but epoch 3 (from 2) is only in memory
        log.persist_epochs()  # the log manager's checkpoint, in a thread
        assert LeaderEpochCache.load(log.directory).entries == log.epochs.entries
        assert log.recovery_point == 3
        log.close()


def test_a_leadership_that_appends_nothing_is_never_written(tmp_path: pathlib.Path) -> None:
    with power_loss_disks(str(tmp_path)) as (disk,):
        log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), 0)
        log.append(_batch(2), 0, leader_epoch=0)
        log.persist_epochs()
        fsyncs = disk.fsyncs
        log.start_leader_epoch(3)  # a broker taking up thousands of leaderships at start-up
        log.persist_epochs()
        assert disk.fsyncs == fsyncs and log.recovery_point == log.durable_end_offset
        log.close()


def test_an_acknowledged_leadership_keeps_its_epoch_across_a_power_loss_before_the_checkpoint(tmp_path: pathlib.Path) -> None:
    """The epoch is not on disk, but the recovery point written meanwhile stops before it: recovery rebuilds it."""
    with power_loss_disks(str(tmp_path)) as (disk,):
        manager = LogManager(str(tmp_path), SMALL_SEGMENTS)
        manager.open_all(now_ms=0)
        log, _ = manager.create("t", 0), manager.create("t", 1)
        for tag in range(60):
            log.append(payload_batch(tag), 0, leader_epoch=0)
        log.flush()
        manager.checkpoint()  # epoch 0 and a recovery point at 60 on disk
        log.start_leader_epoch(3)
        for tag in range(60, 120):  # acknowledged: appended and fsynced, over several segments
            log.append(payload_batch(tag), 0, leader_epoch=3)
        assert log.flush() == 120 and len(log.segment_bases()) > 3
        manager.delete("t", 1)  # rewrites the recovery points on the reactor, with no epoch write
        disk.crash(random.Random(0), lose_everything=True)
        recovered = LogManager(str(tmp_path), SMALL_SEGMENTS)
        recovered.open_all(now_ms=0)
        log = recovered.get("t", 0)
        assert log.log_end_offset == 120
        assert log.epochs.entries == [EpochEntry(epoch=0, start_offset=0), EpochEntry(epoch=3, start_offset=60)]
        recovered.close()


def test_an_epoch_starting_below_a_recovery_point_on_disk_is_written_by_its_append(tmp_path: pathlib.Path) -> None:
    """After a truncation below the recovery point on disk, recovery would not rescan where the new epoch starts."""
    with power_loss_disks(str(tmp_path)) as (disk,):
        manager = LogManager(str(tmp_path), SMALL_SEGMENTS)
        manager.open_all(now_ms=0)
        log = manager.create("t", 0)
        for tag in range(120):
            log.append(payload_batch(tag), 0, leader_epoch=0)
        log.flush()
        manager.checkpoint()  # a recovery point at 120 on disk
        log.truncate_to(30)  # a follower cut back to its new leader's log
        log.start_leader_epoch(2)  # then it leads
        for tag in range(30, 150):
            log.append(payload_batch(tag), 0, leader_epoch=2)
        assert log.flush() == 150
        disk.crash(random.Random(0), lose_everything=True)  # before the next checkpoint
        recovered = LogManager(str(tmp_path), SMALL_SEGMENTS)
        recovered.open_all(now_ms=0)
        log = recovered.get("t", 0)
        assert log.log_end_offset == 150
        assert log.epochs.entries == [EpochEntry(epoch=0, start_offset=0), EpochEntry(epoch=2, start_offset=30)]
        recovered.close()


@pytest.mark.parametrize("append", [False, True], ids=["epoch-wrote-nothing", "epoch-wrote-a-batch"])
def test_a_leadership_epoch_survives_a_crash_exactly_when_a_durable_batch_needs_it(tmp_path: pathlib.Path, append: bool) -> None:
    with power_loss_disks(str(tmp_path)) as (disk,):
        log = PartitionLog.open(str(tmp_path), LogConfig(), 0)
        log.append(_batch(2), 0, leader_epoch=0)
        log.flush()
        log.start_leader_epoch(3)
        if append:
            log.append(_batch(1), 0, leader_epoch=3)
            log.flush()
        disk.crash(random.Random(0), lose_everything=True)
        recovered = PartitionLog.open(str(tmp_path), LogConfig(), 0)
    expected = [EpochEntry(epoch=0, start_offset=0)] + ([EpochEntry(epoch=3, start_offset=2)] if append else [])
    assert recovered.epochs.entries == expected


def test_an_epoch_cut_off_at_open_stays_forgotten_when_the_log_grows_back_past_its_start(tmp_path: pathlib.Path) -> None:
    with power_loss_disks(str(tmp_path)) as (disk,):
        log = PartitionLog.open(str(tmp_path), LogConfig(), 0)
        log.append(_batch(2), 0, leader_epoch=0)
        log.flush()
        log.append(_batch(3), 0, leader_epoch=4)  # its checkpoint entry is written, its batch never synced
        disk.crash(random.Random(0), lose_everything=True)
        recovered = PartitionLog.open(str(tmp_path), LogConfig(), 0)
        assert recovered.log_end_offset == 2 and recovered.epochs.latest_epoch == 0
        recovered.append(_batch(3, leader_epoch=0, base_offset=2), 0, assign_offsets=False)  # a follower copies epoch 0
        recovered.flush()
        disk.crash(random.Random(0), lose_everything=True)
        again = PartitionLog.open(str(tmp_path), LogConfig(), 0)
    assert again.log_end_offset == 5
    assert again.epochs.entries == [EpochEntry(epoch=0, start_offset=0)]  # not epoch 4 starting inside epoch 0's batches
