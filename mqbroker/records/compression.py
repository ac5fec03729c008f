# -*- test-case-name: tests.unit.records.test_compression -*-
"""Record-batch compression codecs (attribute bits 0-2) with bounded decompression.

A compressed batch keeps its 61-byte header in the clear; the codec's output replaces the
records section. Every decompressor here refuses to produce more than ``decompressed_bytes_max``
bytes, so a small hostile batch (a "zip bomb") cannot exhaust memory, and reports any failure as
``CorruptRecordError``.

Formats, chosen to be read by Kafka clients unchanged:

* gzip: one gzip member (RFC 1952), as ``java.util.zip.GZIPOutputStream`` writes.
* snappy: written as a raw snappy block. Kafka's Java client writes the xerial framing
  (``\\x82SNAPPY\\x00`` header, then length-prefixed raw blocks), but its reader, like librdkafka's,
  falls back to a raw block when the header is absent, and a raw block is the cheaper format to
  produce. Both formats are read.
* lz4: one LZ4 frame (the fixed framing Kafka uses since message format v1).
* zstd: one zstd frame.
"""

from __future__ import annotations

import enum
import gzip
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from mqbroker.records.errors import CorruptRecordError

#: Default cap on the bytes one batch may decompress to (Kafka's largest batch is 1 MiB).
DECOMPRESSED_BYTES_MAX = 64 * 1024 * 1024
#: Output asked of lz4 per step; asking for the whole cap at once would allocate it every time.
_LZ4_STEP_BYTES = 1024 * 1024
#: A zstd RLE block turns 4 input bytes into up to 128 KiB, the format's worst expansion.
_ZSTD_EXPANSION_MAX = 32 * 1024
#: Smallest piece of zstd input fed at once, bounding the overshoot past the cap to ~2 MiB.
_ZSTD_PIECE_BYTES_MIN = 64
_GZIP_LEVEL = 6  # java.util.zip.Deflater's default, what Kafka's gzip producer uses
_ZSTD_LEVEL = 3  # Kafka's compression.zstd.level default
_GZIP_WINDOW_BITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer around deflate data
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK_LENGTH = struct.Struct(">i")


class Compression(enum.IntEnum):
    """Compression codec ids as stored in the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


def compress(compression: Compression, data: bytes) -> bytes:
    """Compress a records section with ``compression``."""
    if compression is Compression.NONE:
        return data
    if compression is Compression.GZIP:
        return gzip.compress(data, compresslevel=_GZIP_LEVEL, mtime=0)
    if compression is Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if compression is Compression.LZ4:
        return lz4.frame.compress(data)
    assert compression is Compression.ZSTD, compression
    return zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(data)


def decompress(compression: int, data: bytes, decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX) -> bytes:
    """Decompress a records section; raise ``CorruptRecordError`` if it is malformed or too large."""
    if compression == Compression.NONE:
        return data
    if compression == Compression.GZIP:
        return _decompress_gzip(data, decompressed_bytes_max)
    if compression == Compression.SNAPPY:
        return _decompress_snappy(data, decompressed_bytes_max)
    if compression == Compression.LZ4:
        return _decompress_lz4(data, decompressed_bytes_max)
    if compression == Compression.ZSTD:
        return _decompress_zstd(data, decompressed_bytes_max)
    raise CorruptRecordError(f"unknown compression codec id {compression}; known ids are 0-4")


def _too_large(codec: str, decompressed_bytes_max: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"{codec} records section decompresses to more than {decompressed_bytes_max} bytes; refusing it"
    )


def _decompress_gzip(data: bytes, decompressed_bytes_max: int) -> bytes:
    decompressor = zlib.decompressobj(_GZIP_WINDOW_BITS)
    try:
        output = decompressor.decompress(data, decompressed_bytes_max + 1)
    except zlib.error as error:
        raise CorruptRecordError(f"bad gzip records section: {error}") from error
    if len(output) > decompressed_bytes_max:
        raise _too_large("gzip", decompressed_bytes_max)
    if not decompressor.eof:
        raise CorruptRecordError("truncated gzip records section")
    if decompressor.unused_data:
        raise CorruptRecordError(f"{len(decompressor.unused_data)} bytes after the gzip member")
    return output


def _decompress_snappy(data: bytes, decompressed_bytes_max: int) -> bytes:
    if data.startswith(_XERIAL_MAGIC):
        return _decompress_xerial_snappy(data, decompressed_bytes_max)
    return _decompress_snappy_block(data, decompressed_bytes_max)


def _decompress_snappy_block(block: bytes | memoryview, decompressed_bytes_max: int) -> bytes:
    # A raw block starts with its decompressed length, so the cap is checked before any work.
    try:
        if cramjam.snappy.decompress_raw_len(block) > decompressed_bytes_max:
            raise _too_large("snappy", decompressed_bytes_max)
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as error:
        raise CorruptRecordError(f"bad snappy records section: {error}") from error


def _decompress_xerial_snappy(data: bytes, decompressed_bytes_max: int) -> bytes:
    if len(data) < _XERIAL_HEADER.size:
        raise CorruptRecordError("truncated xerial snappy header")
    view = memoryview(data)
    blocks = []
    total_bytes = 0
    position = _XERIAL_HEADER.size
    while position < len(data):
        if position + _XERIAL_BLOCK_LENGTH.size > len(data):
            raise CorruptRecordError("truncated xerial snappy block length")
        (block_length,) = _XERIAL_BLOCK_LENGTH.unpack_from(data, position)
        position += _XERIAL_BLOCK_LENGTH.size
        if block_length < 0 or position + block_length > len(data):
            raise CorruptRecordError(f"xerial snappy block of {block_length} bytes runs past the section")
        block = _decompress_snappy_block(view[position : position + block_length], decompressed_bytes_max - total_bytes)
        total_bytes += len(block)
        blocks.append(block)
        position += block_length
    return b"".join(blocks)


def _decompress_lz4(data: bytes, decompressed_bytes_max: int) -> bytes:
    decompressor = lz4.frame.LZ4FrameDecompressor()
    chunks = []
    total_bytes = 0
    pending = data
    try:
        while not decompressor.eof:
            chunk = decompressor.decompress(pending, max_length=_LZ4_STEP_BYTES)
            pending = b""
            total_bytes += len(chunk)
            if total_bytes > decompressed_bytes_max:
                raise _too_large("lz4", decompressed_bytes_max)
            if not chunk and decompressor.needs_input and not decompressor.eof:
                raise CorruptRecordError("truncated lz4 records section")
            chunks.append(chunk)
    except RuntimeError as error:
        raise CorruptRecordError(f"bad lz4 records section: {error}") from error
    if decompressor.unused_data:
        raise CorruptRecordError(f"{len(decompressor.unused_data)} bytes after the lz4 frame")
    return b"".join(chunks)


def _decompress_zstd(data: bytes, decompressed_bytes_max: int) -> bytes:
    # zstandard can bound one call's output only by allocating the whole cap up front, so the
    # input is fed in pieces small enough that even worst-case expansion stays near the cap.
    decompressor = zstandard.ZstdDecompressor().decompressobj()
    view = memoryview(data)
    chunks = []
    total_bytes = 0
    position = 0
    try:
        while not decompressor.eof:
            if position >= len(data):
                raise CorruptRecordError("truncated zstd records section")
            remaining_bytes = max(decompressed_bytes_max - total_bytes, 0)
            piece_bytes = max(_ZSTD_PIECE_BYTES_MIN, remaining_bytes // _ZSTD_EXPANSION_MAX)
            chunk = decompressor.decompress(view[position : position + piece_bytes])
            position += piece_bytes
            total_bytes += len(chunk)
            if total_bytes > decompressed_bytes_max:
                raise _too_large("zstd", decompressed_bytes_max)
            chunks.append(chunk)
    except zstandard.ZstdError as error:
        raise CorruptRecordError(f"bad zstd records section: {error}") from error
    if decompressor.unused_data or position < len(data):
        raise CorruptRecordError("bytes after the zstd frame")
    return b"".join(chunks)
