# -*- test-case-name: tests.unit.protocols.amqp.test_frame_split -*-
"""The whole frames at the head of received bytes, a basic.publish with its content as one item. Pure.

A publisher such as pika sends each message as a basic.publish method frame, its content header and one body
frame, and one read brings hundreds of them. ``split_frames`` cuts the frames out of the received bytes and
returns such a run of three (or two, for an empty body) as one item, so the decoder and the connection handle a
published message once rather than frame by frame; the messages right after it on its channel with the same
method and content header (a publisher's messages alike but for their bodies) join that item with their bodies,
so they are decoded and handed on once. It takes only what is well formed: it stops before an
incomplete frame, a frame larger than ``frame_bytes_max`` or one whose frame-end octet is wrong, and the decoder
(``codec.FrameDecoder``) judges what it stopped before, as it judges every frame.

``_frame_split.c`` (built by setup.py as ``mqbroker.protocols.amqp._frame_split``) is a port of
``split_frames_python``: same arguments, same items. It is used when built; this module stays the specification,
and ``tests/unit/protocols/amqp/test_frame_split.py`` checks the compiled splitter against it with hypothesis.
"""

from __future__ import annotations

import struct

from mqbroker.protocols.amqp.spec import FRAME_END, FRAME_OVERHEAD_BYTES

_FRAME_HEADER = struct.Struct(">BHI")
_CONTENT_HEADER = struct.Struct(">HHQ")
_METHOD, _HEADER, _BODY = 1, 2, 3
#: The first four bytes of a basic.publish method payload: class 60, method 40.
_PUBLISH_IDS = b"\x00\x3c\x00\x28"
_BASIC_CLASS_ID = 60

#: A plain frame: (frame type, channel, payload).
Frame = tuple[int, int, bytes]
#: Published messages alike but for their bodies: (channel, basic.publish payload, content-header payload, bodies).
Publish = tuple[int, bytes, bytes, list[bytes]]


def _frame_at(buffer: bytes | bytearray, position: int, frame_bytes_max: int) -> tuple[int, int, int] | None:
    """(type, channel, end) of the well-formed whole frame at ``position`` (its payload ends at ``end``), or None."""
    if len(buffer) - position < _FRAME_HEADER.size:
        return None
    frame_type, channel, size = _FRAME_HEADER.unpack_from(buffer, position)
    if size + FRAME_OVERHEAD_BYTES > frame_bytes_max:
        return None
    end = position + _FRAME_HEADER.size + size
    if len(buffer) <= end or buffer[end] != FRAME_END:
        return None
    return frame_type, channel, end


def split_frames_python(buffer: bytes | bytearray, frame_bytes_max: int) -> tuple[list[Frame | Publish], int]:
    """The well-formed whole frames at the head of ``buffer`` and how many bytes they take. A basic.publish method
    frame directly followed, on its channel, by a content header of class 60 and (unless that announces an empty
    body) one body frame holding the whole body comes as one ``Publish`` item, together with the messages so sent
    right after it on its channel with the same method and content-header payloads; every other frame as a
    ``Frame``."""
    items: list[Frame | Publish] = []
    position = 0
    while (found := _frame_at(buffer, position, frame_bytes_max)) is not None:
        frame_type, channel, end = found
        start = position + _FRAME_HEADER.size
        published = _publish_at(buffer, channel, start, end, frame_bytes_max) if frame_type == _METHOD else None
        if published is None:
            items.append((frame_type, channel, bytes(buffer[start:end])))
            position = end + 1
            continue
        (channel, method, header, body), position = published
        bodies = [body]
        while (alike := _publish_after(buffer, position, frame_bytes_max)) is not None \
                and alike[0][:3] == (channel, method, header):
            bodies.append(alike[0][3])
            position = alike[1]
        items.append((channel, method, header, bodies))
    return items, position


def _publish_after(buffer: bytes | bytearray, position: int,
                   frame_bytes_max: int) -> tuple[tuple[int, bytes, bytes, bytes], int] | None:
    """The message whose basic.publish frame is at ``position``, if its whole content follows it."""
    found = _frame_at(buffer, position, frame_bytes_max)
    if found is None or found[0] != _METHOD:
        return None
    return _publish_at(buffer, found[1], position + _FRAME_HEADER.size, found[2], frame_bytes_max)


def _publish_at(buffer: bytes | bytearray, channel: int, start: int, end: int,
                frame_bytes_max: int) -> tuple[tuple[int, bytes, bytes, bytes], int] | None:
    """The message whose basic.publish payload is ``buffer[start:end]``, and where its frames end; None if the
    frames after it are not its whole content."""
    if end - start < len(_PUBLISH_IDS) or bytes(buffer[start:start + 4]) != _PUBLISH_IDS:
        return None
    header = _frame_at(buffer, end + 1, frame_bytes_max)
    if header is None or header[0] != _HEADER or header[1] != channel:
        return None
    header_start, header_end = end + 1 + _FRAME_HEADER.size, header[2]
    if header_end - header_start < _CONTENT_HEADER.size:
        return None
    class_id, _, body_size = _CONTENT_HEADER.unpack_from(buffer, header_start)
    if class_id != _BASIC_CLASS_ID:
        return None
    method, content_header = bytes(buffer[start:end]), bytes(buffer[header_start:header_end])
    if body_size == 0:
        return (channel, method, content_header, b""), header_end + 1
    body = _frame_at(buffer, header_end + 1, frame_bytes_max)
    if body is None or body[0] != _BODY or body[1] != channel:
        return None
    body_start, body_end = header_end + 1 + _FRAME_HEADER.size, body[2]
    if body_end - body_start != body_size:
        return None
    return (channel, method, content_header, bytes(buffer[body_start:body_end])), body_end + 1


try:
    from mqbroker.protocols.amqp._frame_split import split_frames
except ImportError:  # built without a C compiler: the reference, slower but the same items
    split_frames = split_frames_python

#: True when frames are split by the compiled splitter.
COMPILED_FRAME_SPLITTER = split_frames is not split_frames_python
