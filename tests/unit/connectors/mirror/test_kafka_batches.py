"""Records a Kafka client consumed, encoded again as batches that keep their source offsets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mqbroker.connectors.mirror.batches import copy_batches
from mqbroker.connectors.mirror.kafka_batches import BATCH_RECORDS_MAX, batches_of
from mqbroker.records.decoder import decode_records
from mqbroker.records.header import iter_batches


def test_offsets_keys_values_headers_and_timestamps_are_kept_with_their_gaps() -> None:
    records = [(5, 1_000, b"k", b"v", (("h", b"1"),)), (7, 999, None, None, ()), (8, 1_002, b"", b"x", (("n", None),))]
    data = batches_of(records)
    assert _decoded(data) == records


def test_a_long_run_is_cut_into_batches_the_mirror_copies_whole() -> None:
    records = [(offset, 0, None, b"v", ()) for offset in range(BATCH_RECORDS_MAX * 2 + 1)]
    data = batches_of(records)
    assert [header.records_count for _, header in iter_batches(data)] == [BATCH_RECORDS_MAX, BATCH_RECORDS_MAX, 1]
    copy = copy_batches(data, 0, topic="t", partition=0, check_origin=False, source_alias="a", target_alias="b")
    assert copy.next_position == len(records) and sum(batch.records_count for batch in copy.batches) == len(records)


def test_nothing_consumed_is_no_batch() -> None:
    assert batches_of([]) == b""


@given(st.lists(st.tuples(st.integers(1, 50), st.binary(max_size=40) | st.none()), max_size=60))
def test_any_consumed_run_decodes_back_to_itself(gaps_and_values: list[tuple[int, bytes | None]]) -> None:
    offset = -1
    records = []
    for gap, value in gaps_and_values:
        offset += gap
        records.append((offset, 1_700_000_000_000 + offset, value, value, ()))
    assert _decoded(batches_of(records)) == records


def _decoded(data: bytes) -> list[tuple]:
    return [(record.offset, record.timestamp_ms, record.key, record.value, tuple(record.headers))
            for position, header in iter_batches(data) for record in
            decode_records(data[position:position + header.size_bytes])]
