"""Source batches as the mirror writes them: byte for byte with new producer fields, or rebuilt when it must."""

from __future__ import annotations

import dataclasses

from mqbroker.connectors.mirror.batches import copy_batches, restamp
from mqbroker.connectors.mirror.naming import ORIGIN_HEADER
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.compression import Compression
from mqbroker.records.control import ControlType, encode_control_batch
from mqbroker.records.decoder import decode_records
from mqbroker.records.header import read_header, stamp


def batch(base_offset: int, records: list[tuple[bytes, list[tuple[str, bytes]]]], *, transactional: bool = False,
          compression: Compression = Compression.NONE) -> bytes:
    builder = BatchBuilder(base_offset=base_offset, producer_id=77, producer_epoch=3, base_sequence=40,
                           is_transactional=transactional, compression=compression)
    for number, (value, headers) in enumerate(records):
        builder.append(1_000 + number, b"key-%d" % number, value, headers)
    return builder.build()


def copy(data: bytes, position: int = 0, identity: bool = False):
    return copy_batches(data, position, topic="t", partition=0, check_origin=identity, source_alias="east", target_alias="west")


def test_a_restamped_batch_keeps_its_records_and_takes_the_new_producer_fields() -> None:
    original = batch(10, [(b"a", [("h", b"1")]), (b"b", [])], transactional=True, compression=Compression.ZSTD)
    copied = restamp(original, 5, 1, 99)
    header = read_header(copied)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 99)
    assert not header.is_transactional and header.compression == Compression.ZSTD
    assert decode_records(copied) == decode_records(original)  # the CRC holds: decode checks it


def test_whole_batches_are_copied_raw_and_markers_passed_over() -> None:
    marker = bytearray(encode_control_batch(ControlType.COMMIT, 7, 0, 0, 5))
    stamp(marker, 0, 2, 0)
    data = batch(0, [(b"a", []), (b"b", [])]) + bytes(marker) + batch(3, [(b"c", [])])
    result = copy(data)
    assert [(b.source_base, b.source_next, b.span, b.records_count) for b in result.batches] == [(0, 2, 2, 2), (3, 4, 1, 1)]
    assert all(b.raw is not None for b in result.batches) and result.next_position == 4


def test_a_copy_starting_inside_a_batch_rebuilds_it_from_the_position() -> None:
    result = copy(batch(0, [(b"a", []), (b"b", []), (b"c", [])]), position=1)
    (rebuilt,) = result.batches
    assert rebuilt.raw is None and rebuilt.records_count == 2 and rebuilt.span == 3
    records = decode_records(rebuilt.build(5, 0, 0))
    assert [(r.offset, r.value) for r in records] == [(1, b"b"), (2, b"c")]
    assert read_header(rebuilt.build(5, 0, 0)).last_offset_delta == 2, "offset deltas are kept"


def test_identity_naming_marks_the_origin_and_drops_records_from_the_target_cluster() -> None:
    data = batch(0, [(b"here", []), (b"back-home", [(ORIGIN_HEADER, b"west")]), (b"far", [(ORIGIN_HEADER, b"north")])])
    (rebuilt,) = copy(data, identity=True).batches
    records = decode_records(rebuilt.build(5, 0, 0))
    assert [(r.offset, r.value, dict(r.headers)[ORIGIN_HEADER]) for r in records] == [(0, b"here", b"east"),
                                                                                        (2, b"far", b"north")]
    assert rebuilt.records_count == 2 and rebuilt.max_timestamp == 1_002
    assert copy(batch(0, [(b"loop", [(ORIGIN_HEADER, b"west")])]), identity=True).batches == []


def test_a_corrupt_batch_is_skipped_and_reported() -> None:
    damaged = bytearray(batch(1, [(b"x", [])]))
    damaged[-1] ^= 0x01
    result = copy(batch(0, [(b"a", [])]) + bytes(damaged) + batch(2, [(b"b", [])]))
    assert [b.source_base for b in result.batches] == [0, 2] and len(result.skipped) == 1


def test_consecutive_batches_take_consecutive_sequences() -> None:
    first, second = copy(batch(0, [(b"a", []), (b"b", [])]) + batch(2, [(b"c", [])])).batches
    assert read_header(first.build(1, 0, 7)).base_sequence == 7
    assert read_header(second.build(1, 0, 7 + first.span)).base_sequence == 9
    assert dataclasses.replace(first, raw=None, records=()).span == 2
