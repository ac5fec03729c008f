"""Deliver-at headers: read from any record headers, and batches of any bytes, without escaping errors."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.records.builder import encode_batch
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import read_header
from mqbroker.records.record import Record
from mqbroker.shares.delays import DELAY_HEADER, DELIVER_AT_HEADER, deliver_at_of, delayed_records, record_batch_at

header_values = st.one_of(st.none(), st.binary(max_size=24), st.integers(0, 2**62).map(lambda n: str(n).encode()))
headers = st.lists(st.tuples(st.sampled_from([DELIVER_AT_HEADER, DELAY_HEADER, "other"]), header_values),
                   max_size=5).map(tuple)


@given(timestamp_ms=st.integers(0, 2**50), record_headers=headers)
def test_the_latest_valid_time_wins_and_anything_else_is_ignored(timestamp_ms: int, record_headers: tuple) -> None:
    """Non-numbers are ignored; of x-deliver-at and timestamp + x-delay the later counts."""
    times = [int(value) for name, value in record_headers
             if name == DELIVER_AT_HEADER and value and value.isdigit() and len(value) <= 20]
    times += [timestamp_ms + int(value) for name, value in record_headers
              if name == DELAY_HEADER and value and value.isdigit() and len(value) <= 20]
    assert deliver_at_of(timestamp_ms, record_headers) == (max(times) if times else None)


@settings(max_examples=300)
@given(data=st.data(), record_headers=headers)
def test_mutated_batches_yield_records_or_nothing(data: st.DataObject, record_headers: tuple) -> None:
    """A batch with flipped bytes is scheduled from, or skipped: never an exception."""
    record = Record(offset=0, timestamp_ms=1_000, key=b"k", value=b"v", headers=record_headers)
    batch = bytearray(encode_batch([record], base_offset=0))
    for _ in range(data.draw(st.integers(0, 4))):
        batch[data.draw(st.integers(0, len(batch) - 1))] = data.draw(st.integers(0, 255))
    raw = bytes(batch)
    try:
        header = read_header(raw)
    except CorruptRecordError:
        return  # a batch whose header does not parse is the log reader's to report
    delayed_records(raw, 0, header)
    record_batch_at(raw, 0)
