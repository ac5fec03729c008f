"""The message browser's decoding: text or base64, batches that do not decode passed over, where the next page starts."""

from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st

from mqbroker.limits import http_browse_value_chars_max
from mqbroker.ops.api.record_routes import decoded_records, next_offset, text_of
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.header import stamp
from mqbroker.records.readable import UnreadableBatch
from tests.poison import poison_batch


def _at(batch: bytes, base_offset: int) -> bytes:
    stamped = bytearray(batch)
    stamp(stamped, 0, base_offset, 0)
    return bytes(stamped)


def _batch(*values: bytes) -> bytes:
    builder = BatchBuilder()
    for value in values:
        builder.append(1_000, b"k", value)
    return builder.build()


def _skipped(first: int, last: int) -> UnreadableBatch:
    return UnreadableBatch(topic="t", partition=0, first_offset=first, last_offset=last, error=ValueError("bad"))


def test_a_batch_that_does_not_decode_is_passed_over_and_reported() -> None:
    data = _at(_batch(b"a", b"b"), 0) + _at(poison_batch(records_count=2), 2) + _at(_batch(b"c"), 4)
    skipped: list[UnreadableBatch] = []
    found = decoded_records(data, "t", 0, 1, 10, skipped)
    assert [(record["offset"], record["value"]["text"]) for record in found] == [(1, "b"), (4, "c")]
    assert [(batch.first_offset, batch.last_offset) for batch in skipped] == [(2, 3)]


def test_the_limit_stops_before_later_batches_are_looked_at() -> None:
    data = _at(_batch(b"a", b"b"), 0) + _at(poison_batch(), 2)
    skipped: list[UnreadableBatch] = []
    assert [record["offset"] for record in decoded_records(data, "t", 0, 0, 2, skipped)] == [0, 1]
    assert skipped == []


def test_the_next_page_goes_past_unreadable_batches_only_when_nothing_read_is_left_out() -> None:
    assert next_offset([], True, []) is None
    assert next_offset([5, 6], True, []) == 7
    assert next_offset([], True, [_skipped(2, 3)]) == 4
    assert next_offset([1], True, [_skipped(2, 3)]) == 4
    assert next_offset([4], True, [_skipped(2, 3)]) == 5
    assert next_offset([1], False, [_skipped(2, 3)]) == 2  # records after 1 were read but not shown
    assert next_offset([], False, [_skipped(2, 3)]) is None


@given(st.binary(max_size=3 * http_browse_value_chars_max // 2 + 8) | st.text().map(str.encode))
def test_any_bytes_are_shown_as_text_or_base64_within_the_bound(data: bytes) -> None:
    shown = text_of(data)
    assert shown is not None
    if shown["text"] is not None:
        shown_bytes = shown["text"].encode("utf-8")
        assert shown["base64"] is None and data.startswith(shown_bytes)
    else:
        shown_bytes = base64.b64decode(shown["base64"])
        assert data.startswith(shown_bytes)
    assert len(shown_bytes) <= http_browse_value_chars_max
    assert shown["truncated"] == (len(shown_bytes) < len(data))


def test_text_cut_at_the_bound_inside_a_character_stays_text() -> None:
    data = b"a" * (http_browse_value_chars_max - 1) + "é".encode() + b"z"
    shown = text_of(data)
    assert shown == {"text": "a" * (http_browse_value_chars_max - 1), "base64": None, "truncated": True}
    exact = b"a" * (http_browse_value_chars_max - 1) + "é".encode()
    assert text_of(exact)["truncated"] is True and text_of("é".encode()) == {"text": "é", "base64": None,
                                                                             "truncated": False}
    assert text_of(b"\xff\xfe binary")["text"] is None and text_of(None) is None
