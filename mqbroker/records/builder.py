# -*- test-case-name: tests.unit.records.test_builder -*-
"""Building record batches: ``BatchBuilder`` encodes records straight into batch bytes.

This is the producer's hot path (and the log cleaner's rewrite): ``append`` goes from its
arguments to a record's bytes, looking small varints up in a table, and ``build`` compresses
the records section and writes the header with its CRC-32C.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable, Sequence

import crc32c

from mqbroker.records.compression import Compression, compress
from mqbroker.records.header import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    HEADER_AFTER_CRC,
    HEADER_BEFORE_CRC,
    HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    TimestampType,
)
from mqbroker.records.record import Record, RecordHeader
from mqbroker.records.varint import SMALL_VARINTS, encode_varint

# Bound here, not imported: see docs/architecture.md, "Hot paths".
_SMALL_VARINTS = SMALL_VARINTS
_HEADER_AFTER_CRC = HEADER_AFTER_CRC
_HEADER_BEFORE_CRC = HEADER_BEFORE_CRC

#: Most bytes a record adds beyond its key, value and header bytes: length, attributes,
#: timestamp delta, offset delta (Kafka's 21) plus the key length, value length and header count.
RECORD_OVERHEAD_BYTES_MAX = 21 + 5 + 5 + 5

_INT32_MAX = (1 << 31) - 1
# The record attributes byte is always 0, so it is stored with the timestamp delta that follows it.
_ATTRIBUTES_AND_TIMESTAMP_DELTAS: dict[int, bytes] = {
    delta: b"\x00" + encoded for delta, encoded in _SMALL_VARINTS.items()
}
_NULL_LENGTH = SMALL_VARINTS[-1]
_NO_HEADERS = SMALL_VARINTS[0]
#: ``append_values`` encodes a run of records with C-level loops (map, zip, join) while every varint it
#: needs is in ``SMALL_VARINTS``: offset deltas, value lengths and record lengths below this bound.
_BULK_VARINT_BOUND = max(SMALL_VARINTS) + 1
#: No bound on a batch's size (``append_alike``).
_UNBOUNDED = 1 << 62
_OFFSET_DELTAS = [SMALL_VARINTS[delta] for delta in range(_BULK_VARINT_BOUND)]
_OFFSET_DELTA_SIZES = [len(encoded) for encoded in _OFFSET_DELTAS]


def _encode_headers(headers: Sequence[RecordHeader]) -> bytes:
    parts = [_SMALL_VARINTS.get(len(headers)) or encode_varint(len(headers))]
    for header_key, header_value in headers:
        encoded_key = header_key.encode()
        parts.append(_SMALL_VARINTS.get(len(encoded_key)) or encode_varint(len(encoded_key)))
        parts.append(encoded_key)
        if header_value is None:
            parts.append(_NULL_LENGTH)
        else:
            parts.append(_SMALL_VARINTS.get(len(header_value)) or encode_varint(len(header_value)))
            parts.append(header_value)
    return b"".join(parts)


#: Encoded header sections by their headers tuple, since producers send the same few header sets again and
#: again (an MQTT connection's QoS and client-id headers): a look-up costs ~0.13 us where encoding two headers
#: costs ~1.8 us. Small sections only, and at most ``_HEADER_SECTIONS_MAX`` (the cache starts over when full).
_HEADER_SECTIONS: dict[tuple[RecordHeader, ...], bytes] = {}
_HEADER_SECTIONS_MAX = 1024
_HEADER_SECTION_BYTES_MAX = 256


def _header_section(headers: Sequence[RecordHeader]) -> bytes:
    """``_encode_headers``, remembered for small tuples of headers."""
    if type(headers) is not tuple:
        return _encode_headers(headers)
    try:
        section = _HEADER_SECTIONS.get(headers)
    except TypeError:  # an unhashable value (a bytearray): nothing to remember it by
        return _encode_headers(headers)
    if section is None:
        section = _encode_headers(headers)
        if len(section) <= _HEADER_SECTION_BYTES_MAX:
            if len(_HEADER_SECTIONS) >= _HEADER_SECTIONS_MAX:
                _HEADER_SECTIONS.clear()
            _HEADER_SECTIONS[headers] = section
    return section


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[RecordHeader],
) -> bytes:
    """One record, length prefix included; the per-record cost of every producer."""
    body = b"".join(
        (
            _ATTRIBUTES_AND_TIMESTAMP_DELTAS.get(timestamp_delta) or b"\x00" + encode_varint(timestamp_delta),
            _SMALL_VARINTS.get(offset_delta) or encode_varint(offset_delta),
            _NULL_LENGTH if key is None else _SMALL_VARINTS.get(len(key)) or encode_varint(len(key)),
            key or b"",
            _NULL_LENGTH if value is None else _SMALL_VARINTS.get(len(value)) or encode_varint(len(value)),
            value or b"",
            _header_section(headers) if headers else _NO_HEADERS,
        )
    )
    return (_SMALL_VARINTS.get(len(body)) or encode_varint(len(body))) + body


def _encoded_size(timestamp_delta: int, offset_delta: int, key: bytes | None, value: bytes,
                  headers: Sequence[RecordHeader]) -> int:
    """The bytes of a record."""
    return len(_encode_record(offset_delta, timestamp_delta, key, value, headers))


def _attributes(compression: Compression, timestamp_type: TimestampType, is_transactional: bool, is_control: bool) -> int:
    attributes = compression | (TIMESTAMP_TYPE_MASK if timestamp_type is TimestampType.LOG_APPEND_TIME else 0)
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    return attributes


#: The attributes of an uncompressed, create-time, non-transactional data batch.
_PLAIN_ATTRIBUTES = _attributes(Compression.NONE, TimestampType.CREATE_TIME, False, False)


class BatchBuilder:
    """Encodes records into one batch as they are appended; ``build()`` returns the batch bytes.

    This is the producer's hot path, so ``append`` goes straight from arguments to bytes. The
    first record's timestamp becomes the batch's base timestamp. ``size_bytes`` (uncompressed)
    tells the producer when the batch is full.

    The log cleaner rewrites batches with three more options, as Kafka's cleaner does:
    ``last_offset_delta`` keeps the original batch's last offset (and so its producer's last
    sequence) when records are removed, and lets ``build`` write a header-only batch with no
    records; ``max_timestamp_ms`` keeps the original max timestamp; ``delete_horizon_ms`` sets
    attribute bit 6 and stores the horizon as the base timestamp (record timestamps stay deltas
    from it, so they decode unchanged).
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_base_timestamp",
        "_compression",
        "_fixed_last_offset_delta",
        "_last_offset_delta",
        "_max_timestamp",
        "_partition_leader_epoch",
        "_producer_epoch",
        "_producer_id",
        "_records",
        "_records_count",
        "_size_bytes",
    )

    def __init__(
        self,
        *,
        base_offset: int = 0,
        compression: Compression = Compression.NONE,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        last_offset_delta: int | None = None,
        max_timestamp_ms: int = NO_TIMESTAMP,
        delete_horizon_ms: int | None = None,
    ) -> None:
        assert last_offset_delta is None or 0 <= last_offset_delta <= _INT32_MAX, last_offset_delta
        if (compression is Compression.NONE and timestamp_type is TimestampType.CREATE_TIME and not is_transactional
                and not is_control):  # nearly every batch: no Enum calls (Python code) to make it
            self._compression, self._attributes = compression, _PLAIN_ATTRIBUTES
        else:
            self._compression = Compression(compression)
            self._attributes = _attributes(self._compression, TimestampType(timestamp_type), is_transactional,
                                           is_control)
        if delete_horizon_ms is not None:
            self._attributes |= DELETE_HORIZON_MASK
        self._base_offset = base_offset
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        #: Encoded records: one per ``append``, or a run of them per ``append_values``.
        self._records: list[bytes] = []
        self._records_count = 0
        self._last_offset_delta = -1
        self._fixed_last_offset_delta = last_offset_delta
        self._base_timestamp = NO_TIMESTAMP if delete_horizon_ms is None else delete_horizon_ms
        self._max_timestamp = max_timestamp_ms
        self._size_bytes = HEADER_BYTES

    @property
    def records_count(self) -> int:
        """Records appended so far."""
        return self._records_count

    @property
    def size_bytes(self) -> int:
        """Bytes of the batch built now, before compression."""
        return self._size_bytes

    def append(
        self, timestamp_ms: int, key: bytes | None, value: bytes | None, headers: Sequence[RecordHeader] = ()
    ) -> None:
        """Add a record at the next offset."""
        self.append_at(self._last_offset_delta + 1, timestamp_ms, key, value, headers)

    def append_at(
        self,
        offset_delta: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[RecordHeader] = (),
    ) -> None:
        """Add a record ``offset_delta`` past the base offset; compaction rewrites batches with gaps."""
        highest = _INT32_MAX if self._fixed_last_offset_delta is None else self._fixed_last_offset_delta
        assert self._last_offset_delta < offset_delta <= highest, (self._last_offset_delta, offset_delta)
        self._take_timestamp(timestamp_ms)
        record = _encode_record(offset_delta, timestamp_ms - self._base_timestamp, key, value, headers)
        self._records.append(record)
        self._records_count += 1
        self._last_offset_delta = offset_delta
        self._size_bytes += len(record)

    def append_many(
        self, timestamp_ms: int, records: Sequence[tuple[bytes | None, bytes | None, Sequence[RecordHeader]]]
    ) -> None:
        """``append`` of each (key, value, headers) at one timestamp: a front end's records of one turn, with
        one call for all of them instead of three per record."""
        if not records:
            return
        offset_delta = self._last_offset_delta
        highest = _INT32_MAX if self._fixed_last_offset_delta is None else self._fixed_last_offset_delta
        self._take_timestamp(timestamp_ms)
        timestamp_delta = timestamp_ms - self._base_timestamp
        encoded = [
            _encode_record(offset_delta, timestamp_delta, key, value, headers)
            for offset_delta, (key, value, headers) in enumerate(records, offset_delta + 1)
        ]
        assert self._last_offset_delta + len(encoded) <= highest, (self._last_offset_delta, len(encoded))
        self._records += encoded
        self._records_count += len(encoded)
        self._last_offset_delta += len(encoded)
        self._size_bytes += sum(map(len, encoded))

    def append_values(self, timestamp_ms: int, values: Sequence[bytes], start: int, size_bytes_max: int) -> int:
        """Add keyless, headerless records holding ``values[start:]`` (one timestamp for all), as many as keep
        the batch within ``size_bytes_max`` (at least one if the batch is empty); return how many were added.

        The batch is the same as ``append`` would build, but runs of records are encoded by C-level
        loops (``map``, ``zip``, ``bytes.join``): no Python code runs per record, which is what lets a
        producer's ``send_many`` go several times faster than one ``send`` per record. A record whose
        varints are not all small (a value of 16 KiB or more, an offset delta past 16,383) takes ``append``.
        """
        return self._append_runs(timestamp_ms, None, values, (), start, size_bytes_max)

    def append_alike(self, timestamp_ms: int, key: bytes | None, values: Sequence[bytes],
                     headers: Sequence[RecordHeader]) -> None:
        """``append`` of a record holding each of ``values``, all with ``key`` and ``headers`` and one timestamp
        (a front end's messages alike but for their bodies), encoded as ``append_values`` encodes its runs."""
        self._append_runs(timestamp_ms, key, values, headers, 0, _UNBOUNDED)

    def _append_runs(self, timestamp_ms: int, key: bytes | None, values: Sequence[bytes],
                     headers: Sequence[RecordHeader], start: int, size_bytes_max: int) -> int:
        """``append_values`` with a key and headers for every record."""
        assert self._fixed_last_offset_delta is None, "a cleaner's rewrite appends records one by one"
        shared = (_NULL_LENGTH if key is None else (_SMALL_VARINTS.get(len(key)) or encode_varint(len(key))) + key,
                  _header_section(headers) if headers else _NO_HEADERS)
        position = start
        while position < len(values):
            room = size_bytes_max - self._size_bytes
            # a run somewhat longer than what fits if the values are like the first one, within the small offsets
            run = min(max(16, 2 * room // (len(values[position]) + 8)),
                      max(1, _BULK_VARINT_BOUND - self._last_offset_delta - 1))
            appended, full = self._append_run(timestamp_ms, values[position:position + run], room, key, headers,
                                              shared)
            position += appended
            if full:
                break
        return position - start

    def _append_run(self, timestamp_ms: int, values: Sequence[bytes], room: int, key: bytes | None,
                    headers: Sequence[RecordHeader], shared: tuple[bytes, bytes]) -> tuple[int, bool]:
        """``_append_runs`` for one run: encode as many as fit in ``room`` bytes; return how many, and whether the
        batch is full. ``shared``: the encoded key (with its length) and header section of every record."""
        starts_batch = not self._records_count and not self._attributes & DELETE_HORIZON_MASK
        timestamp_delta = 0 if starts_batch else timestamp_ms - self._base_timestamp
        first_offset = self._last_offset_delta + 1
        value_lengths = list(map(len, values))
        key_part, headers_part = shared
        fixed_size = 1 + len(key_part) + len(headers_part)  # attributes and the parts every record has
        small = (first_offset + len(values) <= _BULK_VARINT_BOUND
                 and max(value_lengths) < _BULK_VARINT_BOUND - 64 - fixed_size and timestamp_delta in SMALL_VARINTS)
        if not small:
            if self._records_count and room < _encoded_size(timestamp_delta, first_offset, key, values[0], headers):
                return 0, True
            self.append(timestamp_ms, key, values[0], headers)
            return 1, False
        offsets = slice(first_offset, first_offset + len(values))
        prefix = _ATTRIBUTES_AND_TIMESTAMP_DELTAS[timestamp_delta]
        length_varints = list(map(SMALL_VARINTS.__getitem__, value_lengths))
        fixed_size += len(prefix) - 1
        body_sizes = list(map(operator.add, map(operator.add, value_lengths, map(len, length_varints)),
                              map(operator.add, _OFFSET_DELTA_SIZES[offsets], itertools.repeat(fixed_size))))
        body_size_varints = list(map(SMALL_VARINTS.__getitem__, body_sizes))
        ends = list(itertools.accumulate(map(operator.add, body_sizes, map(len, body_size_varints))))
        fitting = bisect.bisect_right(ends, room) or (0 if self._records_count else 1)
        if fitting:
            self._take_timestamp(timestamp_ms)
            parts = zip(body_size_varints[:fitting], itertools.repeat(prefix), _OFFSET_DELTAS[offsets],
                        itertools.repeat(key_part), length_varints, values[:fitting], itertools.repeat(headers_part))
            self._records.append(b"".join(itertools.chain.from_iterable(parts)))
            self._records_count += fitting
            self._last_offset_delta = first_offset + fitting - 1
            self._size_bytes += ends[fitting - 1]
        return fitting, fitting < len(values)

    def _take_timestamp(self, timestamp_ms: int) -> None:
        if not self._records_count and not self._attributes & DELETE_HORIZON_MASK:
            self._base_timestamp = timestamp_ms
        if timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms

    def build(self) -> bytes:
        """The finished batch: header, CRC-32C and (compressed) records.

        A batch without records is only built with a fixed ``last_offset_delta`` (the
        cleaner's header-only batch); it has no records section, so no compression either.
        """
        last_offset_delta, attributes, base_timestamp = self._last_offset_delta, self._attributes, self._base_timestamp
        if self._fixed_last_offset_delta is not None:
            last_offset_delta = self._fixed_last_offset_delta
        if self._records:
            records_section = b"".join(self._records)
            if self._compression is not Compression.NONE:
                records_section = compress(self._compression, records_section)
        else:
            assert self._fixed_last_offset_delta is not None, "only a header-only batch of the cleaner holds no record"
            records_section = b""
            attributes &= ~COMPRESSION_MASK
            if not attributes & DELETE_HORIZON_MASK:
                base_timestamp = self._max_timestamp  # Kafka's empty header: both timestamps the original max
        after_crc = _HEADER_AFTER_CRC.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            self._max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            self._records_count,
        )
        return _framed(self._base_offset, self._partition_leader_epoch, after_crc, records_section)


def _framed(base_offset: int, partition_leader_epoch: int, after_crc: bytes, records_section: bytes) -> bytes:
    """A batch from its header fields after the CRC and its records section: the CRC-32C over both, and the
    fields before it."""
    crc = crc32c.crc32c(records_section, crc32c.crc32c(after_crc))
    batch_length = HEADER_BYTES - LOG_OVERHEAD_BYTES + len(records_section)
    before_crc = _HEADER_BEFORE_CRC.pack(base_offset, batch_length, partition_leader_epoch, MAGIC, crc)
    return b"".join((before_crc, after_crc, records_section))


def plain_batch(timestamp_ms: int, records: Sequence[tuple[bytes | None, bytes | None, Sequence[RecordHeader]]]) -> bytes:
    """A plain batch (uncompressed, create time, no producer id, neither transactional nor control) of each (key,
    value, headers) of ``records`` at one timestamp: ``BatchBuilder`` with ``append_many`` and ``build``, in one call.
    A front end writes one per partition and turn, often of one record (a paced MQTT PUBLISH): the builder's
    calls were a fifth of that write's."""
    assert records, "a plain batch holds at least one record"
    if len(records) == 1:
        key, value, headers = records[0]
        records_section = _encode_record(0, 0, key, value, headers)
    else:
        records_section = b"".join([_encode_record(offset_delta, 0, key, value, headers)
                                    for offset_delta, (key, value, headers) in enumerate(records)])
    after_crc = _HEADER_AFTER_CRC.pack(_PLAIN_ATTRIBUTES, len(records) - 1, timestamp_ms, timestamp_ms, NO_PRODUCER_ID,
                                       NO_PRODUCER_EPOCH, NO_SEQUENCE, len(records))
    return _framed(0, NO_PARTITION_LEADER_EPOCH, after_crc, records_section)


def encode_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
) -> bytes:
    """Encode records, whose offsets must increase from ``base_offset``, into one batch."""
    builder = BatchBuilder(
        base_offset=base_offset,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        partition_leader_epoch=partition_leader_epoch,
        timestamp_type=timestamp_type,
    )
    for record in records:
        builder.append_at(record.offset - base_offset, record.timestamp_ms, record.key, record.value, record.headers)
    return builder.build()
