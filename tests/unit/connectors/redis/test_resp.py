"""RESP2 replies parsed incrementally: any split of the bytes gives the same replies; what is not RESP,
or announces more than the bounds, raises only the typed error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.connectors.redis.resp import (
    REPLY_LINE_BYTES_MAX,
    RespErrorReply,
    RespProtocolError,
    RespReader,
    encode_command,
)


def reader() -> RespReader:
    return RespReader(bulk_bytes_max=1_000, array_items_max=50)


def encode(value: Any) -> bytes:
    """A reply as Redis sends it (the test's own encoder)."""
    if value is None:
        return b"$-1\r\n"
    if isinstance(value, bytes):
        return b"$%d\r\n%b\r\n" % (len(value), value)
    if isinstance(value, bool):
        raise TypeError
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, str):
        return b"+%b\r\n" % value.encode()
    if isinstance(value, RespErrorReply):
        return b"-%b\r\n" % str(value).encode()
    return b"*%d\r\n" % len(value) + b"".join(encode(item) for item in value)


def same(left: Any, right: Any) -> bool:
    if isinstance(left, RespErrorReply):
        return isinstance(right, RespErrorReply) and str(left) == str(right)
    if isinstance(left, list):
        return isinstance(right, list) and len(left) == len(right) and all(map(same, left, right))
    return left == right


line_text = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=20)
replies = st.recursive(
    st.one_of(st.none(), st.binary(max_size=60), st.integers(-2**63, 2**63 - 1), line_text,
              line_text.map(RespErrorReply)),
    lambda children: st.lists(children, max_size=5), max_leaves=30)


@given(st.lists(replies, max_size=6), st.lists(st.integers(1, 40), max_size=30))
def test_any_split_of_the_bytes_gives_the_same_replies(values: list[Any], cuts: list[int]) -> None:
    data = b"".join(encode(value) for value in values)
    parser, got, position = reader(), [], 0
    for cut in cuts:
        got += parser.feed(data[position:position + cut])
        position += cut
    got += parser.feed(data[position:])
    assert len(got) == len(values) and all(map(same, values, got))


def test_a_stream_read_arrives_as_nested_lists_of_bytes() -> None:
    data = b"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nk\r\n$1\r\nv\r\n"
    assert reader().feed(data) == [[[b"s", [[b"1-0", [b"k", b"v"]]]]]]
    assert reader().feed(b"*-1\r\n*0\r\n$0\r\n\r\n") == [None, [], b""]


@pytest.mark.parametrize("data, problem", [
    (b"HTTP/1.1 400 Bad Request\r\n", "not RESP"),
    (b"$abc\r\n", "not a number"),
    (b"$1001\r\n", "a bulk string of 1001"),
    (b"*51\r\n", "an array of 51"),
    (b"$-2\r\n", "a bulk string of -2"),
    (b"$3\r\nabcde\r\n", "not followed by CRLF"),
    (b"+" + b"x" * (REPLY_LINE_BYTES_MAX + 1), "a line of more than"),
])
def test_what_is_not_a_redis_reply_is_named(data: bytes, problem: str) -> None:
    with pytest.raises(RespProtocolError, match=problem):
        reader().feed(data)


@given(st.binary(max_size=300))
def test_any_bytes_give_replies_or_the_typed_error(data: bytes) -> None:
    try:
        reader().feed(data)
    except RespProtocolError:
        pass


def test_commands_encode_as_arrays_the_reader_reads_back() -> None:
    assert reader().feed(encode_command([b"XADD", "s", 7, 1.5])) == [[b"XADD", b"s", b"7", b"1.5"]]
