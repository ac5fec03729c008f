"""Reading an endpoint's responses off a persistent connection: framing by length, chunks, interim
responses and the connection's end, fed whole or byte by byte; and garbage (hypothesis) raises only
``PushResponseError``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.shares.push.responses import RESPONSE_HEAD_BYTES_MAX, PushResponseError, ResponseReader

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nServer: x\r\n\r\n"
CHUNKED = b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nwiki\r\n5\r\npedia\r\n0\r\nX-Trailer: 1\r\n\r\n"
INTERIM = b"HTTP/1.1 100 Continue\r\n\r\n"


def _statuses(data: bytes, *, one_byte_at_a_time: bool = False) -> list[int]:
    reader = ResponseReader()
    if not one_byte_at_a_time:
        return reader.feed(data)
    return [status for index in range(len(data)) for status in reader.feed(data[index : index + 1])]


@pytest.mark.parametrize("one_byte_at_a_time", [False, True])
def test_responses_in_a_row_are_split_by_their_framing(one_byte_at_a_time: bool) -> None:
    data = OK + NO_CONTENT + CHUNKED + INTERIM + OK
    assert _statuses(data, one_byte_at_a_time=one_byte_at_a_time) == [200, 204, 500, 200]


def test_a_body_without_length_ends_with_the_connection_which_cannot_carry_more() -> None:
    reader = ResponseReader()
    assert reader.feed(b"HTTP/1.0 202 Accepted\r\n\r\nsome body") == []
    assert reader.must_close and reader.in_response
    assert reader.connection_ended() == 202 and not reader.in_response


def test_connection_close_answers_the_response_then_closes() -> None:
    reader = ResponseReader()
    assert reader.feed(b"HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 0\r\n\r\n") == [503]
    assert reader.must_close and reader.connection_ended() is None


def test_an_oversize_body_is_not_read_and_its_status_stands() -> None:
    reader = ResponseReader(body_bytes_max=10)
    assert reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 11) == [200]
    assert reader.must_close
    chunked = ResponseReader(body_bytes_max=10)
    assert chunked.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\n" + b"x" * 20) == [200]
    assert chunked.must_close


@pytest.mark.parametrize("garbage", [
    b"SMTP 220 hello\r\n\r\n",
    b"HTTP/1.1 2x0 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
    b"HTTP/1.1 200 OK\r\nX: " + b"a" * RESPONSE_HEAD_BYTES_MAX,
])
def test_bytes_that_are_not_a_response_are_refused(garbage: bytes) -> None:
    with pytest.raises(PushResponseError):
        ResponseReader().feed(garbage)


@settings(max_examples=500)
@given(data=st.binary(max_size=300))
def test_garbage_raises_only_push_response_error(data: bytes) -> None:
    reader = ResponseReader(body_bytes_max=64)
    try:
        reader.feed(data)
        reader.connection_ended()
    except PushResponseError:
        pass


@settings(max_examples=300)
@given(data=st.data())
def test_real_responses_cut_and_flipped_raise_only_push_response_error(data: st.DataObject) -> None:
    original = bytearray(data.draw(st.sampled_from([OK, NO_CONTENT, CHUNKED, INTERIM + OK])) * 2)
    for _ in range(data.draw(st.integers(0, 3))):
        original[data.draw(st.integers(0, len(original) - 1))] = data.draw(st.integers(0, 255))
    reader = ResponseReader(body_bytes_max=8)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(original)), max_size=4)))
    try:
        for low, high in zip([0, *cuts], [*cuts, len(original)]):
            reader.feed(bytes(original[low:high]))
    except PushResponseError:
        pass
