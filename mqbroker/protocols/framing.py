"""Bounded receive buffering and length-prefixed frame splitting, shared by the codecs.

Pure: bytes in, frames out. A buffer never grows past its bound: a peer announcing a frame
larger than ``frame_bytes_max`` is refused before its body arrives.
"""

from __future__ import annotations

import struct

_LENGTH = struct.Struct(">i")


class FrameTooLarge(Exception):
    """The peer announced a frame longer than the bound (or a negative length)."""

    def __init__(self, frame_bytes: int, frame_bytes_max: int) -> None:
        super().__init__(f"frame of {frame_bytes} bytes exceeds the limit of {frame_bytes_max} bytes")
        self.frame_bytes = frame_bytes
        self.frame_bytes_max = frame_bytes_max


class LengthPrefixedFrames:
    """Splits a byte stream into frames, each preceded by a 4-byte big-endian length.

    ``feed`` returns every complete frame body (without the prefix); partial data is kept
    until the rest arrives. Parsing is O(n) over the data received.
    """

    __slots__ = ("_buffer", "_frame_bytes_max", "_needed")

    def __init__(self, frame_bytes_max: int) -> None:
        self._buffer = bytearray()
        self._frame_bytes_max = frame_bytes_max
        self._needed = 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buffer)

    def allow_frames_up_to(self, frame_bytes_max: int) -> None:
        """Change the bound (e.g. raised once the peer is authenticated)."""
        self._frame_bytes_max = frame_bytes_max

    def take_buffered(self) -> bytes:
        """Remove and return the bytes of an incomplete frame (a protocol switch hands them on)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        self._needed = 0
        return rest

    def feed(self, data: bytes | memoryview) -> list[bytes]:
        """Add ``data``; return the frame bodies it completes. Raises ``FrameTooLarge``."""
        buffer = self._buffer
        buffer += data
        if len(buffer) < self._needed:
            return []  # still waiting for the body announced earlier
        frames: list[bytes] = []
        position = 0
        end = len(buffer)
        self._needed = 0
        with memoryview(buffer) as view:  # a body is copied once, not sliced to a bytearray and copied again
            while end - position >= 4:
                (length,) = _LENGTH.unpack_from(buffer, position)
                if length < 0 or length > self._frame_bytes_max:
                    raise FrameTooLarge(length, self._frame_bytes_max)
                if end - position - 4 < length:
                    self._needed = length + 4
                    break
                frames.append(bytes(view[position + 4 : position + 4 + length]))
                position += 4 + length
        if position:
            del buffer[:position]
        return frames


def frame(body: bytes) -> bytes:
    """Prefix ``body`` with its 4-byte length."""
    return _LENGTH.pack(len(body)) + body
