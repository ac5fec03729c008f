"""Transactions in the partition log: open transactions bound the LSO, markers end them, aborts are indexed,
verification guards stop late writes, fencing, and all of it rebuilt after restarts and truncation."""

from __future__ import annotations

import os

import pytest

from mqbroker.records.errors import CorruptRecordError
from mqbroker.storage.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.manager import LogManager
from mqbroker.storage.txn_index import AbortedTxn
from tests.unit.storage.logtools import SMALL_SEGMENTS, make_batch, open_log, read_all
from tests.unit.storage.txntools import (
    append_marker,
    append_txn,
    marker,
    read_committed_values,
    txn_batch,
)

P1, P2 = 101, 202


def test_an_open_transaction_holds_the_last_stable_offset_until_its_marker_is_replicated(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch([b"plain"]), 0)
    first = append_txn(log, txn_batch(P1, 0, [b"t1", b"t2"]))
    log.append(make_batch([b"after"]), 0)
    assert first == 1 and log.last_stable_offset(log.log_end_offset) == 1
    assert read_committed_values(log) == [b"plain"]
    at = append_marker(log, marker(P1, committed=True))
    assert log.last_stable_offset(at) == 1  # the marker is not below the high watermark yet
    assert log.last_stable_offset(at + 1) == at + 1
    assert read_committed_values(log) == [b"plain", b"t1", b"t2", b"after"]


def test_the_high_watermark_caps_the_last_stable_offset(tmp_path):
    log = open_log(tmp_path)
    log.append(make_batch([b"a", b"b", b"c"]), 0)
    assert log.last_stable_offset(2) == 2 and log.last_stable_offset(3) == 3


def test_aborted_data_is_indexed_and_skipped_while_committed_data_of_others_is_read(tmp_path):
    log = open_log(tmp_path)
    append_txn(log, txn_batch(P1, 0, [b"p1-aborted"]))
    append_txn(log, txn_batch(P2, 0, [b"p2-committed"]))
    append_txn(log, txn_batch(P1, 1, [b"p1-aborted-too"]))
    abort_at = append_marker(log, marker(P1, committed=False))
    commit_at = append_marker(log, marker(P2, committed=True))
    assert log.aborted_transactions(0, log.log_end_offset) == [
        AbortedTxn(producer_id=P1, first_offset=0, last_offset=abort_at, last_stable_offset=1)
    ]
    assert commit_at == abort_at + 1
    assert read_committed_values(log) == [b"p2-committed"]
    assert log.aborted_transactions(abort_at + 1, log.log_end_offset) == []


def test_a_producers_next_transaction_after_an_abort_is_read(tmp_path):
    log = open_log(tmp_path)
    append_txn(log, txn_batch(P1, 0, [b"no"]))
    append_marker(log, marker(P1, committed=False))
    append_txn(log, txn_batch(P1, 1, [b"yes"]))
    append_marker(log, marker(P1, committed=True))
    assert read_committed_values(log) == [b"yes"]
    assert read_committed_values(log, start=2) == [b"yes"]


def test_a_transaction_opens_only_with_the_guard_of_its_verification(tmp_path):
    log = open_log(tmp_path)
    with pytest.raises(InvalidTxnStateError):
        log.append(txn_batch(P1, 0, [b"x"]), 0, verification_guard=None)
    with pytest.raises(InvalidTxnStateError):
        log.append(txn_batch(P1, 0, [b"x"]), 0, verification_guard=object())
    guard = log.start_verification(P1)
    assert log.needs_verification(P1)
    log.append(txn_batch(P1, 0, [b"x"]), 0, verification_guard=guard)
    assert not log.needs_verification(P1)
    log.append(txn_batch(P1, 1, [b"y"]), 0, verification_guard=None)  # the transaction is open here


def test_a_marker_voids_a_verification_that_started_before_it(tmp_path):
    log = open_log(tmp_path)
    guard = log.start_verification(P1)  # a produce asks the coordinator ...
    append_marker(log, marker(P1, committed=False, epoch=1))  # ... which meanwhile aborts (a timeout)
    with pytest.raises(InvalidTxnStateError):  # the late write cannot open a hanging transaction
        log.append(txn_batch(P1, 0, [b"late"], epoch=1), 0, verification_guard=guard)
    assert log.last_stable_offset(log.log_end_offset) == log.log_end_offset


def test_clients_may_not_write_control_batches(tmp_path):
    log = open_log(tmp_path)
    with pytest.raises(InvalidRecordError):
        log.append(marker(P1, committed=True), 0)
    with pytest.raises(InvalidRecordError):  # transactional without a producer id
        log.append(txn_batch(-1, -1, [b"x"]), 0)
    assert log.log_end_offset == 0


def test_a_plain_batch_inside_an_open_transaction_is_refused(tmp_path):
    log = open_log(tmp_path)
    append_txn(log, txn_batch(P1, 0, [b"t"]))
    with pytest.raises(InvalidTxnStateError):
        log.append(make_batch([b"plain"], producer_id=P1, producer_epoch=0, base_sequence=1), 0)


def test_a_bumped_epoch_marker_fences_the_old_producer(tmp_path):
    log = open_log(tmp_path)
    append_txn(log, txn_batch(P1, 0, [b"t"]))
    append_marker(log, marker(P1, committed=False, epoch=1))
    with pytest.raises(InvalidProducerEpochError):
        log.append(txn_batch(P1, 1, [b"zombie"], epoch=0), 0, verification_guard=log.start_verification(P1))
    with pytest.raises(InvalidProducerEpochError):
        append_marker(log, marker(P1, committed=True, epoch=0))


def test_a_marker_from_an_older_coordinator_is_fenced(tmp_path):
    log = open_log(tmp_path)
    append_txn(log, txn_batch(P1, 0, [b"t"]))
    append_marker(log, marker(P1, committed=True, coordinator_epoch=5))
    with pytest.raises(TransactionCoordinatorFencedError):
        append_marker(log, marker(P1, committed=False, coordinator_epoch=4))


def test_a_garbled_control_batch_is_corrupt(tmp_path):
    log = open_log(tmp_path)
    batch = bytearray(marker(P1, committed=True))
    batch[-1] ^= 0xFF  # inside the record; CRC now wrong too
    with pytest.raises(CorruptRecordError):
        append_marker(log, bytes(batch))


def _mixed_history(log: PartitionLog) -> None:
    """Aborted, committed and open transactions across several small segments."""
    for round_number in range(6):
        sequence = round_number * 3
        append_txn(log, txn_batch(P1, sequence, [b"a%d-%d" % (round_number, n) * 60 for n in range(3)]))
        append_txn(log, txn_batch(P2, sequence, [b"c%d-%d" % (round_number, n) * 60 for n in range(3)]))
        append_marker(log, marker(P1, committed=False))
        append_marker(log, marker(P2, committed=True))
    append_txn(log, txn_batch(P1, 18, [b"open" * 20]))


def _expected_committed() -> list[bytes]:
    return [b"c%d-%d" % (r, n) * 60 for r in range(6) for n in range(3)]


@pytest.mark.parametrize("damage", ["none", "unclean", "missing-index", "garbage-index", "truncated-index"])
def test_the_index_and_open_transactions_survive_a_restart(tmp_path, damage):
    log = open_log(tmp_path)
    _mixed_history(log)
    assert len(log.segment_bases()) > 2
    before = (log.aborted_transactions(0, log.log_end_offset), log.last_stable_offset(log.log_end_offset))
    if damage == "unclean":
        log.flush()
        reopened = open_log(tmp_path, recovery_point=0)
    else:
        log.close()
        indexes = sorted(name for name in os.listdir(tmp_path) if name.endswith(".txnindex") and
                         os.path.getsize(tmp_path / name))
        if damage == "missing-index":
            os.unlink(tmp_path / indexes[0])
        elif damage == "garbage-index":
            (tmp_path / indexes[-1]).write_bytes(b"\x00\x07" + os.urandom(32))
        elif damage == "truncated-index":
            with open(tmp_path / indexes[0], "r+b") as file:
                file.truncate(20)
        reopened = open_log(tmp_path, clean_shutdown=True)
    after = (reopened.aborted_transactions(0, reopened.log_end_offset),
             reopened.last_stable_offset(reopened.log_end_offset))
    assert after == before and len(before[0]) == 6
    assert read_committed_values(reopened) == _expected_committed()


def test_a_log_manager_restart_keeps_an_open_transaction_open(tmp_path):
    manager = LogManager(str(tmp_path), SMALL_SEGMENTS)
    log = manager.create("t", 0)
    log.append(make_batch([b"before"]), 0)
    append_txn(log, txn_batch(P1, 0, [b"open"]))
    manager.checkpoint()
    manager.close()
    again = LogManager(str(tmp_path), SMALL_SEGMENTS)
    again.open_all(0)
    reopened = again.get("t", 0)
    assert reopened.open_transactions() == {P1: 1}
    assert reopened.last_stable_offset(reopened.log_end_offset) == 1
    append_marker(reopened, marker(P1, committed=True))
    assert reopened.open_transactions() == {}


def test_truncation_drops_markers_index_entries_and_reopens_their_transactions(tmp_path):
    log = open_log(tmp_path)
    append_txn(log, txn_batch(P1, 0, [b"x"]))
    abort_at = append_marker(log, marker(P1, committed=False))
    assert log.aborted_transactions(0, log.log_end_offset)
    log.truncate_to(abort_at)
    assert log.aborted_transactions(0, log.log_end_offset + 10) == []
    assert log.open_transactions() == {P1: 0}
    reopened_at = append_marker(log, marker(P1, committed=True))
    assert reopened_at == abort_at and read_committed_values(log) == [b"x"]


def test_a_follower_copy_builds_the_same_index_and_state(tmp_path):
    leader = open_log(tmp_path / "leader")
    _mixed_history(leader)
    follower = open_log(tmp_path / "follower")
    for batch in read_all(leader):
        follower.append(batch, 0, assign_offsets=False)
    end = leader.log_end_offset
    assert follower.aborted_transactions(0, end) == leader.aborted_transactions(0, end)
    assert follower.open_transactions() == leader.open_transactions()
    assert read_committed_values(follower) == _expected_committed()


def test_an_aborted_range_found_in_a_later_segment_is_listed_for_an_earlier_fetch(tmp_path):
    log = open_log(tmp_path)
    first = append_txn(log, txn_batch(P1, 0, [b"long" * 200]))
    for n in range(8):  # other data rolls several segments before the abort
        log.append(make_batch([b"filler-%d" % n * 100]), 0)
    abort_at = append_marker(log, marker(P1, committed=False))
    assert len(log.segment_bases()) > 2
    found = log.aborted_transactions(first, first + 1)
    assert [(entry.first_offset, entry.last_offset) for entry in found] == [(first, abort_at)]
