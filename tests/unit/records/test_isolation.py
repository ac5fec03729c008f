"""read_committed on the reader's side: aborted batches and markers dropped, committed ones kept, per batch."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mqbroker.records.builder import BatchBuilder
from mqbroker.records.control import ControlType, encode_control_batch
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches, stamp
from mqbroker.records.isolation import committed_batches, committed_records


def _at(batch: bytes, offset: int) -> bytes:
    stamped = bytearray(batch)
    stamp(stamped, 0, offset, 0)
    return bytes(stamped)


def _data(offset: int, value: bytes, producer_id: int = -1) -> bytes:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=0 if producer_id >= 0 else -1,
                           is_transactional=producer_id >= 0)
    builder.append(0, None, value)
    return _at(builder.build(), offset)


def _marker(offset: int, producer_id: int, committed: bool) -> bytes:
    kind = ControlType.COMMIT if committed else ControlType.ABORT
    return _at(encode_control_batch(kind, producer_id, 0, 0, 0), offset)


def _values(buffer: bytes, aborted) -> list[bytes | None]:
    return [record.value for position, header in committed_batches(buffer, aborted)
            for record in decode_records(buffer[position : position + header.size_bytes])]


LOG = b"".join([
    _data(0, b"plain"),
    _data(1, b"p1-aborted", producer_id=1),
    _data(2, b"p2-committed", producer_id=2),
    _marker(3, 1, committed=False),
    _data(4, b"p1-next", producer_id=1),
    _marker(5, 2, committed=True),
    _marker(6, 1, committed=True),
])


def test_aborted_batches_and_markers_are_dropped():
    assert _values(LOG, [(1, 1)]) == [b"plain", b"p2-committed", b"p1-next"]


def test_read_uncommitted_only_drops_markers():
    assert _values(LOG, None) == [b"plain", b"p1-aborted", b"p2-committed", b"p1-next"]


def test_committed_records_returns_the_buffer_itself_when_nothing_is_dropped():
    plain = _data(0, b"a") + _data(1, b"b")
    assert committed_records(plain, []) is plain
    assert committed_records(LOG, [(1, 1)]) == (
        _data(0, b"plain") + _data(2, b"p2-committed", producer_id=2) + _data(4, b"p1-next", producer_id=1))
    assert committed_records(_marker(0, 1, committed=True), []) == b""


@given(st.binary(max_size=300), st.lists(st.tuples(st.integers(-1, 5), st.integers(-5, 20)), max_size=4))
def test_garbage_raises_corrupt_record_error_only(data, aborted):
    try:
        list(committed_batches(data, aborted))
    except CorruptRecordError:
        pass


def test_every_batch_boundary_is_kept():
    kept = [header.base_offset for _, header in committed_batches(LOG, [(1, 1)])]
    assert kept == [0, 2, 4] and len(list(iter_batches(LOG))) == 7
