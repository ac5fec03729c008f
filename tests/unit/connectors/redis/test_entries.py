"""Stream entries and list items as records; Redis replies of the wrong shape raise only the typed error."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.connectors.redis.entries import (
    ENTRY_HEADER,
    EntryTooLargeError,
    MalformedReplyError,
    SourceRecord,
    entry_record,
    list_record,
    read_group_entries,
    record_partition,
    size_chunks,
    stream_entries,
)
from mqbroker.records.builder import BatchBuilder


def test_an_entry_takes_its_key_and_value_from_the_chosen_fields_and_names_its_origin() -> None:
    record = entry_record("src", b"1-0", [b"device", b"d1", b"temp", b"21"], "device", "temp")
    assert (record.key, record.value) == (b"d1", b"21")
    assert record.headers == ((ENTRY_HEADER, b"src:1-0"),)


def test_without_a_value_field_the_value_is_every_field_as_json() -> None:
    record = entry_record("src", b"1-0", [b"a", b"1", b"b", b"\xff"], None, None)
    assert record.key is None and json.loads(record.value) == {"a": "1", "b": "\ufffd"}


def test_keyless_records_spread_by_entry_id_and_list_items_by_content() -> None:
    partitions = {record_partition(entry_record("s", f"{i}-0".encode(), [b"f", b"v"], None, "f"), 4)
                  for i in range(50)}
    assert len(partitions) > 1
    assert record_partition(list_record(b"job"), 4) == record_partition(list_record(b"job"), 4)


def test_a_read_group_reply_lists_its_entries_and_nil_means_none() -> None:
    reply = [[b"s", [[b"1-0", [b"f", b"v"]], [b"2-0", None]]]]
    assert read_group_entries(reply) == [(b"1-0", [b"f", b"v"]), (b"2-0", [])]
    assert read_group_entries(None) == []


reply_values = st.recursive(st.one_of(st.none(), st.binary(max_size=5), st.integers(), st.text(max_size=3)),
                            lambda children: st.lists(children, max_size=4), max_leaves=20)


@given(reply_values)
def test_any_reply_parses_or_raises_the_typed_error(reply) -> None:
    for parse in (read_group_entries, stream_entries):
        try:
            parse(reply)
        except MalformedReplyError:
            pass


@pytest.mark.parametrize("reply", [b"x", [b"s"], [[b"s", [[b"1-0", [b"odd"]]]]], [[b"s", [[1, []]]]]])
def test_malformed_replies_are_refused(reply) -> None:
    with pytest.raises(MalformedReplyError):
        read_group_entries(reply)


def source_record(size: int, number: int, keyed: bool) -> SourceRecord:
    return SourceRecord(entry_id=b"%d-0" % number, key=b"k%d" % number if keyed else None, value=b"v" * size,
                        headers=((ENTRY_HEADER, b"connector:%d-0" % number),))


@given(st.lists(st.tuples(st.integers(0, 3_000), st.booleans()), max_size=40), st.integers(200, 20_000))
def test_chunks_cover_every_record_in_order_and_each_builds_a_batch_within_the_limit(
        shapes: list[tuple[int, bool]], max_message_bytes: int) -> None:
    records = [source_record(size, number, keyed) for number, (size, keyed) in enumerate(shapes)]
    try:
        runs = size_chunks(records, max_message_bytes)
    except EntryTooLargeError as error:
        assert "max.message.bytes" in str(error) and "oversized=skip" in str(error)
        return
    assert [index for start, end in runs for index in range(start, end)] == list(range(len(records)))
    assert all(end > start for start, end in runs)
    for start, end in runs:
        builder = BatchBuilder()
        for record in records[start:end]:
            builder.append(1_700_000_000_000, record.key, record.value, record.headers)
        assert len(builder.build()) <= max_message_bytes


def test_an_entry_that_cannot_fit_alone_is_named() -> None:
    with pytest.raises(EntryTooLargeError, match="entry 1-0 needs about"):
        size_chunks([source_record(10, 0, True), source_record(5_000, 1, True)], 2_000)
