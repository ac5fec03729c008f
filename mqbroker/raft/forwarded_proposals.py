"""Proposals forwarded to the leader, and the wire frames that carry them beside Raft messages.

A follower that is asked to propose sends ``ForwardedProposal`` to the leader it knows (as
etcd forwards MsgProp); the leader proposes the data and, once the entry is applied, answers
with ``ForwardedResult``: the state machine's result bytes, or an error code and message.
Both travel on the controller connections next to Raft messages, so ``encode_frame`` and
``decode_frame`` handle all three: tags 1..7 are ``mqbroker.raft.codec``'s, 8 and 9 are these.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mqbroker.raft import codec
from mqbroker.raft.errors import RaftCodecError
from mqbroker.raft.messages import NO_NODE, Message

_FORWARDED_PROPOSAL_TAG = 8
_FORWARDED_RESULT_TAG = 9
_PROPOSAL_HEAD = struct.Struct(">BIIQHI")  # tag, from, to, request id, principal length, data length
_RESULT_HEAD = struct.Struct(">BIIQhII")


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardedProposal:
    """A follower asks the leader to propose ``data`` on behalf of ``principal``; ``request_id`` matches the answer."""

    from_id: int
    to_id: int
    request_id: int
    data: bytes
    #: Who the proposal is made for (``Broker:<from_id>`` for the broker's own control-plane records).
    principal: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardedResult:
    """The leader's answer: ``error_code`` 0 and the apply result, or an error and its message."""

    from_id: int
    to_id: int
    request_id: int
    error_code: int = 0
    leader_id: int = NO_NODE
    data: bytes = b""


PeerFrame = Message | ForwardedProposal | ForwardedResult


def encode_frame(frame: PeerFrame) -> bytes:
    """Encode a Raft message or a forwarding frame (without the length prefix)."""
    match frame:
        case ForwardedProposal():
            principal = frame.principal.encode("utf-8")
            head = _PROPOSAL_HEAD.pack(
                _FORWARDED_PROPOSAL_TAG, frame.from_id, frame.to_id, frame.request_id, len(principal), len(frame.data)
            )
            return head + principal + frame.data
        case ForwardedResult():
            head = _RESULT_HEAD.pack(
                _FORWARDED_RESULT_TAG,
                frame.from_id,
                frame.to_id,
                frame.request_id,
                frame.error_code,
                frame.leader_id,
                len(frame.data),
            )
            return head + frame.data
        case _:
            return codec.encode(frame)


def decode_frame(data: bytes) -> PeerFrame:
    """Decode what ``encode_frame`` wrote; anything malformed raises ``RaftCodecError``."""
    if not data:
        raise RaftCodecError("an empty controller frame")
    if data[0] == _FORWARDED_PROPOSAL_TAG:
        tag, from_id, to_id, request_id, principal_length, length = _unpack(_PROPOSAL_HEAD, data)
        _check_body(data, _PROPOSAL_HEAD.size, principal_length + length, from_id, to_id)
        principal_end = _PROPOSAL_HEAD.size + principal_length
        try:
            principal = data[_PROPOSAL_HEAD.size : principal_end].decode("utf-8")
        except UnicodeDecodeError:
            raise RaftCodecError("a forwarded proposal's principal is not UTF-8") from None
        return ForwardedProposal(from_id=from_id, to_id=to_id, request_id=request_id, principal=principal,
                                 data=data[principal_end:])
    if data[0] == _FORWARDED_RESULT_TAG:
        tag, from_id, to_id, request_id, error_code, leader_id, length = _unpack(_RESULT_HEAD, data)
        _check_body(data, _RESULT_HEAD.size, length, from_id, to_id)
        return ForwardedResult(
            from_id=from_id,
            to_id=to_id,
            request_id=request_id,
            error_code=error_code,
            leader_id=leader_id,
            data=data[_RESULT_HEAD.size :],
        )
    return codec.decode(data)


def _unpack(layout: struct.Struct, data: bytes) -> tuple[int, ...]:
    if len(data) < layout.size:
        raise RaftCodecError(f"a forwarding frame of {len(data)} bytes is shorter than its {layout.size}-byte header")
    return layout.unpack_from(data)


def _check_body(data: bytes, head_size: int, length: int, from_id: int, to_id: int) -> None:
    if len(data) - head_size != length:
        raise RaftCodecError(f"a forwarding frame announces {length} data bytes but carries {len(data) - head_size}")
    if from_id == NO_NODE or to_id == NO_NODE:
        raise RaftCodecError("a forwarding frame from or to node 0")
