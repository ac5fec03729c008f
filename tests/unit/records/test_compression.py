# -*- test-case-name: tests.unit.records.test_compression -*-
"""Batch compression codecs: round trips, Kafka-readable formats, and bounded, typed failures."""

from __future__ import annotations

import struct

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.records.compression import Compression, compress, decompress
from mqbroker.records.errors import CorruptRecordError

CODECS = list(Compression)
COMPRESSING_CODECS = [codec for codec in Compression if codec is not Compression.NONE]
SAMPLE = b"".join(b"record %d: " % index + b"payload " * (index % 7) for index in range(2000))


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.name)
@pytest.mark.parametrize("data", [b"", b"x", SAMPLE], ids=["empty", "one-byte", "sample"])
def test_every_codec_round_trips(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", COMPRESSING_CODECS, ids=lambda codec: codec.name)
def test_compressing_codecs_shrink_repetitive_data(codec: Compression) -> None:
    assert len(compress(codec, SAMPLE)) < len(SAMPLE) // 2


@pytest.mark.parametrize("codec", COMPRESSING_CODECS, ids=lambda codec: codec.name)
def test_a_zip_bomb_is_refused_at_the_cap(codec: Compression) -> None:
    bomb = compress(codec, bytes(8 * 1024 * 1024))
    assert len(bomb) < 512 * 1024
    with pytest.raises(CorruptRecordError, match="more than 1048576 bytes"):
        decompress(codec, bomb, decompressed_bytes_max=1024 * 1024)


@pytest.mark.parametrize("codec", COMPRESSING_CODECS, ids=lambda codec: codec.name)
def test_output_exactly_at_the_cap_is_accepted(codec: Compression) -> None:
    assert decompress(codec, compress(codec, SAMPLE), decompressed_bytes_max=len(SAMPLE)) == SAMPLE


@pytest.mark.parametrize("codec", COMPRESSING_CODECS, ids=lambda codec: codec.name)
@pytest.mark.parametrize(
    "damage",
    [lambda data: data[:-1], lambda data: data[: len(data) // 2], lambda data: data + b"\x00junk", lambda data: b""],
    ids=["last-byte-cut", "half-cut", "trailing-bytes", "empty"],
)
def test_damaged_sections_raise_corrupt_record(codec: Compression, damage) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, damage(compress(codec, SAMPLE)))


def test_unknown_codec_id_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="unknown compression codec id 5"):
        decompress(5, b"anything")


def test_snappy_is_written_as_a_raw_block() -> None:
    assert bytes(cramjam.snappy.decompress_raw(compress(Compression.SNAPPY, SAMPLE))) == SAMPLE


def _xerial(*blocks: bytes) -> bytes:
    """Snappy in the xerial framing Kafka's Java producer writes."""
    framed = [b"\x82SNAPPY\x00", struct.pack(">ii", 1, 1)]
    for block in blocks:
        raw = bytes(cramjam.snappy.compress_raw(block))
        framed += [struct.pack(">i", len(raw)), raw]
    return b"".join(framed)


def test_xerial_framed_snappy_from_java_producers_is_read() -> None:
    assert decompress(Compression.SNAPPY, _xerial(SAMPLE[:1000], SAMPLE[1000:])) == SAMPLE


def test_xerial_blocks_share_one_cap() -> None:
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress(Compression.SNAPPY, _xerial(SAMPLE, SAMPLE), decompressed_bytes_max=len(SAMPLE) + 1)


def test_truncated_xerial_block_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="runs past"):
        decompress(Compression.SNAPPY, _xerial(SAMPLE)[:-1])


@given(codec=st.sampled_from(CODECS), garbage=st.binary(max_size=300))
def test_garbage_raises_only_corrupt_record(codec: Compression, garbage: bytes) -> None:
    try:
        output = decompress(codec, garbage, decompressed_bytes_max=64 * 1024)
    except CorruptRecordError:
        return
    assert len(output) <= 64 * 1024


@given(
    codec=st.sampled_from(COMPRESSING_CODECS),
    data=st.binary(max_size=2000),
    position_fraction=st.floats(min_value=0, max_value=1, exclude_max=True),
    replacement=st.integers(min_value=0, max_value=255),
)
def test_mutated_sections_raise_only_corrupt_record(
    codec: Compression, data: bytes, position_fraction: float, replacement: int
) -> None:
    section = bytearray(compress(codec, data))
    section[int(position_fraction * len(section))] = replacement
    try:
        output = decompress(codec, bytes(section), decompressed_bytes_max=4096)
    except CorruptRecordError:
        return
    assert len(output) <= 4096
