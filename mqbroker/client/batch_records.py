# -*- test-case-name: tests.unit.client.test_batch_records -*-
"""A producer batch's records, encoded as they are sent: ``BatchRecords``, compiled when it could be built.

``ProducerCore`` keeps one per open batch and adds each record with ``append_within``: one call that encodes the
record unless the batch would grow past its bound. ``_batch_records.c`` (built by setup.py as
``mqbroker.client._batch_records``) is a port of ``BatchRecordsPython``, the reference here: ``BatchBuilder``
itself plus that bounded append. The compiled one makes one C call per record where the reference makes five
Python calls, and keeps the records in one buffer rather than a bytes object each; both give the same batch
bytes (``tests/unit/client/test_batch_records.py`` holds them to it with hypothesis).
"""

from __future__ import annotations

from collections.abc import Sequence

from mqbroker.records.builder import RECORD_OVERHEAD_BYTES_MAX, BatchBuilder

#: Most bytes a record header adds beyond its key's and value's bytes (their length varints).
HEADER_OVERHEAD_BYTES_MAX = 10


def encoded_size_max(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None) -> int:
    """An upper bound of the bytes a record adds to a batch: its fields plus varint framing."""
    size = RECORD_OVERHEAD_BYTES_MAX + (len(key) if key else 0) + (len(value) if value else 0)
    for header_key, header_value in headers or ():
        size += HEADER_OVERHEAD_BYTES_MAX + len(header_key.encode()) + (len(header_value) if header_value else 0)
    return size


class BatchRecordsPython(BatchBuilder):
    """The reference ``BatchRecords``: a ``BatchBuilder`` with the producer's bounded append."""

    __slots__ = ()

    def append_within(self, timestamp_ms: int, key: bytes | None, value: bytes | None,
                      headers: Sequence[tuple[str, bytes | None]] | None, size_bytes_max: int) -> int:
        """Add a record at the next offset and return its index, unless the batch holds records already and its
        ``size_bytes`` plus ``encoded_size_max`` of the record would pass ``size_bytes_max``: then return -1.
        (A record larger than ``size_bytes_max`` so gets a batch of its own.)"""
        index = self.records_count
        if index and self.size_bytes + encoded_size_max(key, value, headers) > size_bytes_max:
            return -1
        self.append(timestamp_ms, key, value, headers or ())
        return index


class RecordSlotPython:
    """The reference ``RecordSlot``: where a sent record is, its batch, its index there and its timestamp.

    The blocking producer's ``RecordFuture`` subclasses ``RecordSlot``: compiled, a ``send`` makes its future
    without running Python code."""

    __slots__ = ("_batch", "_index", "_timestamp_ms")

    def __init__(self, batch: object, index: int, timestamp_ms: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp_ms = timestamp_ms


try:
    from mqbroker.client._batch_records import BatchRecords, RecordSlot
except ImportError:  # built without a C compiler: the references, slower but the same batches and futures
    BatchRecords = BatchRecordsPython  # type: ignore[misc,assignment]
    RecordSlot = RecordSlotPython  # type: ignore[misc,assignment]

#: True when a producer's records are encoded by the compiled ``BatchRecords`` (and its futures are ``RecordSlot``s).
COMPILED_BATCH_RECORDS = BatchRecords is not BatchRecordsPython
