"""Decoding fetched batches from a position: records past it, control batches passed over, corrupt ones skipped."""

from __future__ import annotations

import struct

from mqbroker.connectors.reading import read_committed, records_from
from mqbroker.model import AbortedTransaction, FetchResult
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.control import ControlType, encode_control_batch
from mqbroker.records.header import compute_crc, read_header, stamp

#: Where a batch's records begin (after the 61-byte header); its CRC field sits at byte 17.
RECORDS_AT = 61
_CRC = struct.Struct(">I")


def batch(base_offset: int, values: list[bytes]) -> bytes:
    builder = BatchBuilder(base_offset=base_offset)
    for value in values:
        builder.append(1_000, b"k", value, [("h", b"v")])
    return builder.build()


def test_records_before_the_position_are_left_out_and_the_next_position_is_after_the_last_batch() -> None:
    data = batch(0, [b"a", b"b", b"c"]) + batch(3, [b"d"])
    fetched = records_from(data, 1, topic="t", partition=0)
    assert [record[2] for record in fetched.records] == [b"b", b"c", b"d"]
    assert [record[0] for record in fetched.records] == [1, 2, 3]
    assert fetched.next_position == 4 and fetched.skipped == []


def test_a_corrupt_batch_is_skipped_and_reported() -> None:
    damaged = bytearray(batch(2, [b"x"]))
    damaged[-1] ^= 0xFF
    fetched = records_from(batch(0, [b"a", b"b"]) + bytes(damaged) + batch(3, [b"c"]), 0, topic="t", partition=0)
    assert [record[2] for record in fetched.records] == [b"a", b"b", b"c"]
    (skipped,) = fetched.skipped
    assert (skipped.topic, skipped.partition, skipped.first_offset, skipped.last_offset) == ("t", 0, 2, 2)
    assert fetched.next_position == 4


def test_a_partial_batch_at_the_end_waits_for_the_next_fetch() -> None:
    whole = batch(0, [b"a"])
    fetched = records_from(whole + batch(1, [b"b"])[:30], 0, topic="t", partition=0)
    assert [record[2] for record in fetched.records] == [b"a"] and fetched.next_position == 1


def test_a_transaction_marker_is_passed_over() -> None:
    marker = bytearray(encode_control_batch(ControlType.COMMIT, 7, 0, 0, 1_000))
    stamp(marker, 0, 1, 0)
    fetched = records_from(batch(0, [b"a"]) + bytes(marker) + batch(2, [b"b"]), 0, topic="t", partition=0)
    assert [(record[0], record[2]) for record in fetched.records] == [(0, b"a"), (2, b"b")]
    assert fetched.next_position == 3



def test_a_batch_with_a_good_crc_and_garbage_records_is_skipped() -> None:
    poison = bytearray(batch(1, [b"x"]))
    poison[RECORDS_AT:] = b"\xff" * (len(poison) - RECORDS_AT)  # a record length varint that never ends
    _CRC.pack_into(poison, 17, compute_crc(poison, 0, read_header(bytes(poison)).size_bytes))
    fetched = records_from(batch(0, [b"a"]) + bytes(poison) + batch(2, [b"b"]), 0, topic="t", partition=0)
    assert [record[2] for record in fetched.records] == [b"a", b"b"] and len(fetched.skipped) == 1


def _transactional(offset: int, value: bytes, producer_id: int) -> bytes:
    builder = BatchBuilder(base_offset=offset, producer_id=producer_id, producer_epoch=0, base_sequence=0,
                           is_transactional=True)
    builder.append(1_000, None, value)
    return builder.build()


def _marker(offset: int, producer_id: int, kind: ControlType) -> bytes:
    marker = bytearray(encode_control_batch(kind, producer_id, 0, 0, 0))
    stamp(marker, 0, offset, 0)
    return bytes(marker)


def test_read_committed_drops_aborted_transactions_and_goes_on_past_the_markers_it_ends_with() -> None:
    data = (batch(0, [b"plain"]) + _transactional(1, b"committed", 7) + _transactional(2, b"aborted", 8)
            + _marker(3, 7, ControlType.COMMIT) + _marker(4, 8, ControlType.ABORT))
    result = FetchResult(topic="t", partition=0, records=data, high_watermark=5, last_stable_offset=5,
                         aborted_transactions=(AbortedTransaction(producer_id=8, first_offset=2),))
    fetched = read_committed(result, 0)
    assert [record[2] for record in fetched.records] == [b"plain", b"committed"]
    assert fetched.next_position == 5
    tail = FetchResult(topic="t", partition=0, records=_transactional(2, b"aborted", 8) + _marker(3, 8, ControlType.ABORT),
                       aborted_transactions=(AbortedTransaction(producer_id=8, first_offset=2),))
    nothing = read_committed(tail, 2)
    assert nothing.records == [] and nothing.next_position == 4
