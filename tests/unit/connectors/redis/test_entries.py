"""Stream entries and list items as records; Redis replies of the wrong shape raise only the typed error."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.connectors.redis.entries import (
    ENTRY_HEADER,
    MalformedReplyError,
    entry_record,
    list_record,
    read_group_entries,
    record_partition,
    stream_entries,
)


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
