"""Batches rewritten in a topic's compression codec: the same records, offsets and producer fields, a valid CRC."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.records.builder import encode_batch
from mqbroker.records.compression import Compression
from mqbroker.records.control import ControlType, encode_control_batch
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches
from mqbroker.records.recompress import recompressed
from mqbroker.records.record import Record
from tests.unit.records.batchtools import sample_records


def _batches(buffer: bytes | memoryview) -> list[tuple[object, list[Record]]]:
    """Each batch's header fields but the codec, length and CRC, and its records."""
    view = memoryview(buffer)
    return [((header.base_offset, header.attributes & ~0x07, header.last_offset_delta, header.base_timestamp,
              header.max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence,
              header.records_count), decode_records(view[position:position + header.size_bytes]))
            for position, header in iter_batches(view)]


@pytest.mark.parametrize("source", list(Compression))
@pytest.mark.parametrize("target", list(Compression))
def test_every_codec_becomes_every_other_with_the_same_records_and_producer_fields(
        source: Compression, target: Compression) -> None:
    batch = encode_batch(sample_records(5, base_offset=10), base_offset=10, compression=source, producer_id=7,
                         producer_epoch=2, base_sequence=40, is_transactional=True)
    rewritten = recompressed(batch, target)
    assert [header.compression for _, header in iter_batches(rewritten)] == [target]  # iter_batches checks the CRC
    assert _batches(rewritten) == _batches(batch)
    if source == target:
        assert rewritten is batch  # nothing to do: no copy


def test_control_batches_stay_as_they_are() -> None:
    marker = encode_control_batch(ControlType.COMMIT, 7, 2, 0, 1000)
    data = encode_batch(sample_records(2), compression=Compression.GZIP)
    rewritten = bytes(recompressed(marker + data, Compression.ZSTD))
    assert rewritten.startswith(marker)
    assert [header.compression for _, header in iter_batches(rewritten)] == [Compression.NONE, Compression.ZSTD]


@given(values=st.lists(st.binary(max_size=64), min_size=1, max_size=8), target=st.sampled_from(list(Compression)))
def test_any_records_survive_a_codec_change(values: list[bytes], target: Compression) -> None:
    records = [Record(offset=i, timestamp_ms=1000 + i, key=None, value=value) for i, value in enumerate(values)]
    batch = encode_batch(records, compression=Compression.LZ4)
    assert _batches(recompressed(batch, target)) == _batches(batch)


@given(garbage=st.binary(max_size=200))
def test_garbage_raises_only_the_corrupt_record_error(garbage: bytes) -> None:
    try:
        recompressed(garbage, Compression.GZIP)
    except CorruptRecordError:
        pass
