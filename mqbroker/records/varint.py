# -*- test-case-name: tests.unit.records.test_varint -*-
"""Zig-zag varints, the integers of a record (protobuf ``sint32`` / ``sint64``, Kafka's ``ByteUtils.writeVarint``).

A value is zig-zag mapped to an unsigned one (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...) and written in
7-bit little-endian groups, the high bit of a byte saying that another follows.
"""

from __future__ import annotations

from mqbroker.records.errors import CorruptRecordError

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def encode_varint(value: int) -> bytes:
    """Zig-zag encode ``value`` (an int64)."""
    assert _INT64_MIN <= value <= _INT64_MAX, value
    unsigned = (value << 1) ^ (value >> 63)
    groups = bytearray()
    while unsigned >= 0x80:
        groups.append(unsigned & 0x7F | 0x80)
        unsigned >>= 7
    groups.append(unsigned)
    return bytes(groups)


#: Lengths and deltas are nearly always small: encoders look their encodings up instead of computing them.
SMALL_VARINTS: dict[int, bytes] = {value: encode_varint(value) for value in range(-1, 1 << 14)}


def read_varint(data: bytes, position: int, end: int, bits: int) -> tuple[int, int]:
    """Read a zig-zag varint of at most ``bits`` bits that must end before ``end``: (value, next position)."""
    # Fast paths: deltas, counts and record lengths nearly always fit one or two bytes.
    if position + 1 < end:
        first, second = data[position], data[position + 1]
        if first < 0x80:
            return (first >> 1) ^ -(first & 1), position + 1
        if second < 0x80:
            unsigned = (first & 0x7F) | (second << 7)
            return (unsigned >> 1) ^ -(unsigned & 1), position + 2
    unsigned = 0
    shift = 0
    index = position
    limit = min(end, position + (bits + 6) // 7)
    while index < limit:
        byte = data[index]
        index += 1
        unsigned |= (byte & 0x7F) << shift
        if byte < 0x80:
            if unsigned >> bits:
                break
            return (unsigned >> 1) ^ -(unsigned & 1), index
        shift += 7
    raise CorruptRecordError(f"bad {bits}-bit varint at byte {position}: truncated, too long or out of range")
