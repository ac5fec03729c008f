# -*- test-case-name: tests.unit.client.test_batch_records -*-
"""The compiled ``BatchRecords`` against its reference: the same answers to the same appends, the same batch bytes.

``test_producer`` runs the producer core over both (its ``records_kind`` fixture); here any sequence of appends,
valid or not, goes to both, and what each returns, its sizes, its errors and the built batch must be equal.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.client import batch_records, producer
from mqbroker.client._batch_records import BatchRecords, RecordSlot
from mqbroker.client.batch_records import BatchRecordsPython, RecordSlotPython
from mqbroker.client.blocking.delivery import RecordFuture
from mqbroker.records.compression import Compression
from mqbroker.records.decoder import decode_records
from mqbroker.records.header import read_header

# Values of every size class: none, empty, short, and 16 KiB and more (three-byte length varints).
large_bytes = st.tuples(st.integers(min_value=16_384, max_value=70_000), st.binary(min_size=1, max_size=8)).map(
    lambda size_and_pattern: (size_and_pattern[1] * size_and_pattern[0])[: size_and_pattern[0]])
field_bytes = st.none() | st.just(b"") | st.binary(max_size=200) | large_bytes
record_headers = st.none() | st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=40)),
                                      max_size=3) | st.lists(st.tuples(st.text(max_size=3), st.binary(max_size=3)),
                                                             max_size=2).map(tuple)
# Timestamps near each other (one-byte deltas), far apart (up to 2**40 either way) and before the first.
timestamps = st.integers(min_value=0, max_value=2**50) | st.integers(min_value=-(2**40), max_value=2**40)
size_bounds = st.integers(min_value=0, max_value=200_000)
appends = st.tuples(st.just("append_within"), timestamps, field_bytes, field_bytes, record_headers, size_bounds)
value_runs = st.tuples(st.just("append_values"), timestamps,
                       st.lists(st.binary(max_size=300), max_size=40) | st.lists(large_bytes, max_size=3),
                       st.integers(min_value=0, max_value=45), size_bounds)
settings = st.fixed_dictionaries({
    "compression": st.sampled_from(list(Compression)),
    "producer_id": st.integers(min_value=-1, max_value=2**63 - 1),
    "producer_epoch": st.integers(min_value=-1, max_value=2**15 - 1),
    "base_sequence": st.integers(min_value=-1, max_value=2**31 - 1),
    "is_transactional": st.booleans(),
})


def outcome(records: Any, call: tuple[Any, ...]) -> tuple[Any, ...]:
    """What one ``BatchRecords`` made of one call: its answer, or its error's type."""
    name, *arguments = call
    try:
        answer = getattr(records, name)(*arguments)
    except (TypeError, AttributeError, OverflowError) as error:
        return ("error", type(error).__name__)
    return ("answer", answer, records.size_bytes, records.records_count)


def test_the_compiled_batch_records_are_built_and_used() -> None:
    assert batch_records.COMPILED_BATCH_RECORDS
    assert batch_records.BatchRecords is BatchRecords
    assert producer.BatchRecords is BatchRecords
    assert batch_records.RecordSlot is RecordSlot and RecordFuture.__bases__ == (RecordSlot,)


@given(options=settings, calls=st.lists(appends | value_runs, min_size=1, max_size=12))
def test_any_appends_give_the_same_answers_and_batch(options: dict[str, Any], calls: list[tuple[Any, ...]]) -> None:
    compiled, reference = BatchRecords(**options), BatchRecordsPython(**options)
    for call in calls:
        assert outcome(compiled, call) == outcome(reference, call)
    if reference.records_count:
        batch = compiled.build()
        assert batch == reference.build()
        assert read_header(batch).records_count == reference.records_count
        assert len(decode_records(batch)) == reference.records_count


def test_a_record_past_the_bound_is_refused_unless_the_batch_is_empty() -> None:
    for kind in (BatchRecords, BatchRecordsPython):
        records = kind()
        assert records.append_within(1, None, b"v" * 500, None, 100) == 0  # alone: taken whatever its size
        assert records.append_within(1, None, b"v", None, 100) == -1
        assert records.append_values(1, [b"v"], 0, 100) == 0
        assert (records.records_count, records.size_bytes) == (1, 61 + 509)


@pytest.mark.parametrize("call", [
    ("append_within", 5, "not bytes", b"v", None, 10_000),
    ("append_within", 5, None, b"v", [(b"key not str", b"v")], 10_000),
    ("append_within", 5, None, b"v", [("h", 7)], 10_000),
    ("append_within", 5, None, b"v", [("h\ud800", b"v")], 10_000),
    ("append_within", 5, None, b"v", [("h", b"v", b"third")], 10_000),
    ("append_within", 2**63 - 1, None, b"v", None, 10_000),
    ("append_values", 5, [b"a", b"b", None], 0, 10_000),
    ("append_values", 5, [b"a", 7], 0, 10_000),
], ids=["key-not-bytes", "header-key-not-str", "header-value-not-bytes", "header-key-not-utf8", "header-not-a-pair",
        "timestamp-delta-past-int64", "none-value", "int-value"])
def test_a_refused_append_raises_and_leaves_the_compiled_batch_as_it_was(call: tuple[Any, ...]) -> None:
    """Both raise; the compiled one adds nothing (the reference may have added a ``send_many`` run's head)."""
    compiled = BatchRecords()
    assert compiled.append_within(-(2**62), b"k", b"first", [("h", b"v")], 10_000) == 0
    before = compiled.build()
    with pytest.raises((TypeError, AttributeError, OverflowError, UnicodeEncodeError)):
        getattr(compiled, call[0])(*call[1:])
    reference = BatchRecordsPython()
    reference.append_within(-(2**62), b"k", b"first", [("h", b"v")], 10_000)
    with pytest.raises((TypeError, AttributeError, OverflowError, UnicodeEncodeError, AssertionError, ValueError)):
        getattr(reference, call[0])(*call[1:])
    assert (compiled.records_count, compiled.build()) == (1, before)


def test_bytearrays_and_memoryviews_are_encoded_like_bytes() -> None:
    batches = []
    for wrap in (bytes, bytearray, memoryview):
        records = BatchRecords()
        records.append_within(9, wrap(b"key"), wrap(b"value"), [("h", wrap(b"header"))], 10_000)
        records.append_values(9, [wrap(b"more")], 0, 10_000)
        batches.append(records.build())
    assert batches[0] == batches[1] == batches[2]


def test_building_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        BatchRecords().build()


@pytest.mark.parametrize("kind", [RecordSlot, RecordSlotPython], ids=["compiled", "reference"])
def test_a_record_slot_holds_its_three_fields_and_a_cycle_through_it_is_collected(kind: type) -> None:
    class Future(kind):  # type: ignore[misc,valid-type]
        __slots__ = ()

    class Batch:
        """Holds its future: a cycle (a callback waiting on the batch refers to its record's future)."""

    batch = Batch()
    future = Future(batch, 3, 17)
    assert (future._batch, future._index, future._timestamp_ms) == (batch, 3, 17)
    assert not hasattr(future, "__dict__")
    batch.future = future  # type: ignore[attr-defined]
    alive = weakref.ref(batch)
    del batch, future
    gc.collect()
    assert alive() is None
    with pytest.raises(TypeError):
        kind(1, 2)
