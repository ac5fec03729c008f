"""Length-prefixed frame splitting: any cut of the stream gives the same frames; bounds hold."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.protocols.framing import FrameTooLarge, LengthPrefixedFrames, frame


@given(
    bodies=st.lists(st.binary(max_size=300), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=20),
)
def test_any_cut_of_the_stream_yields_the_frames_in_order(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frame(body) for body in bodies)
    splitter = LengthPrefixedFrames(frame_bytes_max=300)
    received: list[bytes] = []
    start = 0
    for cut in sorted({min(cut, len(stream)) for cut in cuts}) + [len(stream)]:
        received += splitter.feed(memoryview(stream)[start:cut])
        start = cut
    assert received == bodies
    assert all(type(body) is bytes for body in received)
    assert splitter.buffered_bytes == 0


def test_a_partial_frame_is_kept_until_its_body_arrives() -> None:
    splitter = LengthPrefixedFrames(frame_bytes_max=100)
    data = frame(b"first") + frame(b"second")
    assert splitter.feed(data[:12]) == [b"first"]
    assert splitter.buffered_bytes == 3
    assert splitter.feed(data[12:]) == [b"second"]
    assert splitter.take_buffered() == b""


def test_a_frame_over_the_bound_is_refused_before_its_body() -> None:
    splitter = LengthPrefixedFrames(frame_bytes_max=10)
    with pytest.raises(FrameTooLarge) as refused:
        splitter.feed(struct.pack(">i", 11))
    assert (refused.value.frame_bytes, refused.value.frame_bytes_max) == (11, 10)
    with pytest.raises(FrameTooLarge):
        LengthPrefixedFrames(frame_bytes_max=10).feed(struct.pack(">i", -1))


def test_a_large_frame_arriving_in_chunks_is_returned_whole() -> None:
    body = bytes(range(256)) * 4096
    stream = frame(body) + frame(b"next")
    splitter = LengthPrefixedFrames(frame_bytes_max=len(body))
    received: list[bytes] = []
    for start in range(0, len(stream), 65536):
        received += splitter.feed(stream[start : start + 65536])
    assert received == [body, b"next"]
