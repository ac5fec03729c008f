"""The compiled values-only decoder against its Python reference: same values, same first offset, same errors.

``decode_section_values`` hands a consumer only the values (or (key, value) pairs) of the records at or after a
start offset; every input, valid or not, goes through both decoders and through ``decode_section`` (full rows),
whose records it must agree with.
"""

from __future__ import annotations

import gc
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mqbroker.records import decoder
from mqbroker.records._section import decode_section_values
from mqbroker.records.builder import encode_batch
from mqbroker.records.section import decode_section_values_python
from mqbroker.records.header import HEADER_BYTES, read_header
from mqbroker.records.record import Record
from tests.unit.records.test_section import INT64, batches, outcome


def values_arguments(batch: bytes, start_offset: int, with_keys: bool) -> list[Any]:
    """``decode_section_values``'s arguments for an uncompressed batch."""
    header = read_header(batch)
    return [batch[HEADER_BYTES:], header.base_offset, header.last_offset_delta, header.records_count, start_offset,
            with_keys]


def assert_same_values(*arguments: Any) -> tuple[Any, ...]:
    """Both decoders give the same (first offset, values), or the same typed error with the same message."""
    compiled = outcome(decode_section_values, *arguments)
    assert compiled == outcome(decode_section_values_python, *arguments)
    return compiled


def test_the_compiled_values_decoder_is_built_and_used() -> None:
    assert decoder.COMPILED_SECTION_DECODER
    assert decoder.decode_section_values is decode_section_values


@given(batch=batches(), start_delta=st.integers(min_value=-5, max_value=600_000), with_keys=st.booleans())
def test_values_are_the_records_values_from_the_start_offset(batch: bytes, start_delta: int, with_keys: bool) -> None:
    records = decoder.decode_records(batch)
    start_offset = max(0, records[0].offset + start_delta)
    kind, (first_offset, values) = assert_same_values(*values_arguments(batch, start_offset, with_keys))
    kept = [record for record in records if record.offset >= start_offset]
    assert first_offset == (kept[0].offset if kept else None)
    assert values == ([(record.key, record.value) for record in kept] if with_keys
                      else [record.value for record in kept])
    assert decoder.decode_values(batch, start_offset, with_keys) == (first_offset, values)


@given(batch=batches(), cut=st.integers(min_value=0), edits=st.lists(st.tuples(st.integers(min_value=0),
                                                                                 st.integers(0, 255)), max_size=4),
       with_keys=st.booleans())
def test_truncated_and_mutated_sections_give_the_same_values_or_error(
    batch: bytes, cut: int, edits: list[tuple[int, int]], with_keys: bool,
) -> None:
    arguments = values_arguments(batch, 0, with_keys)
    section = bytearray(arguments[0][: cut % (len(arguments[0]) + 1)])
    for position, byte in edits:
        if section:
            section[position % len(section)] = byte
    arguments[0] = bytes(section)
    assert_same_values(*arguments)


@given(section=st.binary(max_size=300), base_offset=INT64,
       last_offset_delta=st.integers(min_value=-1, max_value=2**31 - 1),
       records_count=st.integers(min_value=0, max_value=6) | st.integers(min_value=-(2**31), max_value=2**31 - 1),
       start_offset=INT64, with_keys=st.booleans())
def test_garbage_gives_the_same_error_or_the_same_values(
    section: bytes, base_offset: int, last_offset_delta: int, records_count: int, start_offset: int, with_keys: bool,
) -> None:
    assert_same_values(section, base_offset, last_offset_delta, records_count, start_offset, with_keys)


def test_pairs_stay_out_of_the_collector() -> None:
    batch = encode_batch([Record(offset=offset, timestamp_ms=5, key=b"k", value=b"v%d" % offset, headers=())
                          for offset in range(10, 14)], base_offset=10)
    arguments = values_arguments(batch, 11, True)
    assert decode_section_values(*arguments) == (11, [(b"k", b"v11"), (b"k", b"v12"), (b"k", b"v13")])
    assert not any(gc.is_tracked(pair) for pair in decode_section_values(*arguments)[1])
    arguments[4] = 2**63 - 1  # every record before it: no first offset, no values
    assert decode_section_values(*arguments) == (None, [])
