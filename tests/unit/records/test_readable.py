"""Readers inside the broker skip batches they cannot decode and go on after them."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from mqbroker.records.builder import BatchBuilder
from mqbroker.records.control import ControlType, encode_control_batch
from mqbroker.records.header import stamp
from mqbroker.records.readable import UnreadableBatch, UnreadableTally, readable_records
from tests.poison import poison_batch


def _at(batch: bytes, base_offset: int) -> bytes:
    stamped = bytearray(batch)
    stamp(stamped, 0, base_offset, 0)
    return bytes(stamped)


def _batch(*values: bytes) -> bytes:
    builder = BatchBuilder()
    for value in values:
        builder.append(1_000, b"k", value)
    return builder.build()


def _read(data: bytes, start_offset: int = 0) -> tuple[list[tuple[int, bytes | None]], list[UnreadableBatch]]:
    skipped: list[UnreadableBatch] = []
    records = [(record.offset, record.value)
               for record in readable_records(data, start_offset, topic="t", partition=3, skipped=skipped.append)]
    return records, skipped


def test_a_poison_batch_between_good_ones_is_skipped_and_reported_with_its_offsets() -> None:
    data = _at(_batch(b"a", b"b"), 0) + _at(poison_batch(records_count=3), 2) + _at(_batch(b"c"), 5)
    records, skipped = _read(data)
    assert records == [(0, b"a"), (1, b"b"), (5, b"c")]
    [bad] = skipped
    assert (bad.topic, bad.partition, bad.first_offset, bad.last_offset) == ("t", 3, 2, 4)
    assert "varint" in str(bad.error)


def test_a_batch_wholly_before_the_start_offset_is_not_decoded() -> None:
    records, skipped = _read(_at(poison_batch(), 0) + _at(_batch(b"a", b"b"), 1), start_offset=2)
    assert records == [(2, b"b")] and skipped == []


def test_a_wrong_crc_is_reported_like_garbage_records() -> None:
    batch = bytearray(_batch(b"a"))
    struct.pack_into(">I", batch, 17, 0)
    records, [bad] = _read(bytes(batch))
    assert records == [] and "CRC" in str(bad.error)


@given(garbage=st.binary(max_size=200), count=st.integers(1, 50))
def test_garbage_records_never_escape_as_an_exception(garbage: bytes, count: int) -> None:
    """Whatever a CRC-valid batch holds, the reader skips it or reads it; the batch after it is always read."""
    good = _batch(b"after")
    data = poison_batch(garbage, count) + _at(good, count)
    records, skipped = _read(data)
    assert records[-1] == (count, b"after")
    assert len(skipped) <= 1


def test_the_tally_counts_by_reader_and_topic_and_gives_the_log_fields() -> None:
    tally = UnreadableTally()
    bad = UnreadableBatch(topic="mqtt.messages", partition=0, first_offset=7, last_offset=7, error=ValueError("x"))  # type: ignore[arg-type]
    tally.skipped("MQTT reader", bad)
    fields = tally.skipped("MQTT reader", bad)
    assert fields["skipped_total"] == 2 and fields["first_offset"] == 7 and fields["partition"] == 0
    tally.skipped_at("offsets loader", "__consumer_offsets", 1, 3, 3, ValueError("y"))
    assert tally.counts() == {("MQTT reader", "mqtt.messages"): 2, ("offsets loader", "__consumer_offsets"): 1}


def test_an_aborted_transactions_batches_and_every_marker_are_passed_over() -> None:
    def transactional(producer_id: int, value: bytes) -> bytes:
        builder = BatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=0, is_transactional=True)
        builder.append(1_000, b"k", value)
        return builder.build()

    data = (_at(transactional(7, b"aborted"), 0) + _at(transactional(8, b"committed"), 1)
            + _at(encode_control_batch(ControlType.ABORT, 7, 0, 0, 1_000), 2)
            + _at(encode_control_batch(ControlType.COMMIT, 8, 0, 0, 1_000), 3) + _at(_batch(b"plain"), 4))
    records = [(record.offset, record.value) for record in readable_records(
        data, 0, topic="t", partition=0, skipped=lambda batch: None, aborted=[(7, 0)])]
    assert records == [(1, b"committed"), (4, b"plain")]
    everything = [record.value for record in readable_records(data, 0, topic="t", partition=0,
                                                               skipped=lambda batch: None)]
    assert everything == [b"aborted", b"committed", b"plain"]  # read_uncommitted: only the markers go
