"""Wire encoding of Raft messages (and of configurations stored in entries), bytes in and out.

Layout, big-endian: a one-byte message tag, then ``term u64, from u32, to u32``, then the
fields of that message in declaration order (``u64`` indexes and terms, ``u8`` booleans,
``u32``-length-prefixed byte strings, ``u32``-counted entry lists). Framing is the
transport's job (``mqbroker.protocols.framing``). ``decode`` checks everything the core
relies on (contiguous entry indexes, decodable configurations, no trailing bytes) so a
peer's garbage raises ``RaftCodecError`` instead of tripping an assertion in the core.
"""

from __future__ import annotations

import struct

from mqbroker.raft.errors import RaftCodecError
from mqbroker.raft.messages import (
    NO_NODE,
    AppendEntries,
    AppendEntriesResponse,
    Configuration,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    Snapshot,
    SnapshotMetadata,
    VoteRequest,
    VoteResponse,
)

_HEADER = struct.Struct(">BQII")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_ENTRY_HEAD = struct.Struct(">QQBI")
_TAGS: dict[type, int] = {
    VoteRequest: 1,
    VoteResponse: 2,
    AppendEntries: 3,
    AppendEntriesResponse: 4,
    Heartbeat: 5,
    HeartbeatResponse: 6,
    InstallSnapshot: 7,
}


class _Reader:
    """A cursor over received bytes that raises ``RaftCodecError`` instead of reading past the end."""

    def __init__(self, data: bytes) -> None:
        self._view = memoryview(data)
        self._position = 0

    def remaining(self) -> int:
        return len(self._view) - self._position

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        if self.remaining() < layout.size:
            raise RaftCodecError(f"truncated Raft message: need {layout.size} bytes at {self._position}")
        values = layout.unpack_from(self._view, self._position)
        self._position += layout.size
        return values

    def u8(self) -> int:
        return self.unpack(_U8)[0]

    def u64(self) -> int:
        return self.unpack(_U64)[0]

    def boolean(self) -> bool:
        value = self.u8()
        if value > 1:
            raise RaftCodecError(f"invalid boolean {value} at {self._position - 1}")
        return value == 1

    def take(self, length: int) -> bytes:
        if self.remaining() < length:
            raise RaftCodecError(f"byte string of {length} bytes overruns the message")
        value = bytes(self._view[self._position : self._position + length])
        self._position += length
        return value

    def blob(self) -> bytes:
        return self.take(self.unpack(_U32)[0])

    def finish(self) -> None:
        if self.remaining():
            raise RaftCodecError(f"{self.remaining()} trailing bytes after a Raft message")


def _blob(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


# ---- configurations ----------------------------------------------------------------------


def encode_configuration(configuration: Configuration) -> bytes:
    """Encode a membership (the data of a CONFIGURATION entry)."""
    parts = []
    for group in (configuration.voters, configuration.learners):
        parts.append(_U16.pack(len(group)))
        parts.extend(_U32.pack(node_id) for node_id in sorted(group))
    return b"".join(parts)


def _read_configuration(reader: _Reader) -> Configuration:
    groups = []
    for _ in range(2):
        (count,) = reader.unpack(_U16)
        node_ids = [reader.unpack(_U32)[0] for _ in range(count)]
        if NO_NODE in node_ids or len(set(node_ids)) != count:
            raise RaftCodecError(f"invalid node ids in a configuration: {node_ids}")
        groups.append(frozenset(node_ids))
    voters, learners = groups
    if voters & learners:
        raise RaftCodecError(f"nodes {sorted(voters & learners)} are both voter and learner")
    return Configuration(voters=voters, learners=learners)


def decode_configuration(data: bytes) -> Configuration:
    """Decode the data of a CONFIGURATION entry."""
    reader = _Reader(data)
    configuration = _read_configuration(reader)
    reader.finish()
    return configuration


# ---- entries and snapshots ---------------------------------------------------------------


def _encode_entries(entries: tuple[Entry, ...]) -> bytes:
    parts = [_U32.pack(len(entries))]
    for entry in entries:
        parts.append(_ENTRY_HEAD.pack(entry.term, entry.index, entry.kind, len(entry.data)))
        parts.append(entry.data)
    return b"".join(parts)


def _read_entries(reader: _Reader, previous_index: int, term: int) -> tuple[Entry, ...]:
    (count,) = reader.unpack(_U32)
    if count * _ENTRY_HEAD.size > reader.remaining():
        raise RaftCodecError(f"{count} entries cannot fit in {reader.remaining()} bytes")
    entries = []
    for position in range(count):
        entry_term, index, kind, length = reader.unpack(_ENTRY_HEAD)
        if index != previous_index + 1 + position or entry_term > term:
            raise RaftCodecError(f"entry {index}/{entry_term} out of place after {previous_index} in term {term}")
        try:
            entry_kind = EntryKind(kind)
        except ValueError:
            raise RaftCodecError(f"unknown entry kind {kind}") from None
        data = reader.take(length)
        if entry_kind is EntryKind.CONFIGURATION:
            decode_configuration(data)
        entries.append(Entry(term=entry_term, index=index, kind=entry_kind, data=data))
    return tuple(entries)


def encode_snapshot(snapshot: Snapshot) -> bytes:
    """Encode a snapshot with its metadata (also the layout of snapshot files)."""
    metadata = snapshot.metadata
    return (
        _U64.pack(metadata.index)
        + _U64.pack(metadata.term)
        + encode_configuration(metadata.configuration)
        + _blob(snapshot.data)
    )


def _read_snapshot(reader: _Reader) -> Snapshot:
    index = reader.u64()
    term = reader.u64()
    configuration = _read_configuration(reader)
    metadata = SnapshotMetadata(index=index, term=term, configuration=configuration)
    return Snapshot(metadata=metadata, data=reader.blob())


def decode_snapshot(data: bytes) -> Snapshot:
    """Decode what ``encode_snapshot`` wrote."""
    reader = _Reader(data)
    snapshot = _read_snapshot(reader)
    reader.finish()
    return snapshot


# ---- messages ----------------------------------------------------------------------------


def encode(message: Message) -> bytes:
    """Encode one peer message."""
    head = _HEADER.pack(_TAGS[type(message)], message.term, message.from_id, message.to_id)
    match message:
        case VoteRequest():
            body = _U64.pack(message.last_log_index) + _U64.pack(message.last_log_term) + _U8.pack(message.pre_vote)
        case VoteResponse():
            body = _U8.pack(message.granted) + _U8.pack(message.pre_vote)
        case AppendEntries():
            body = (
                _U64.pack(message.previous_index)
                + _U64.pack(message.previous_term)
                + _U64.pack(message.commit_index)
                + _encode_entries(message.entries)
            )
        case AppendEntriesResponse():
            body = (
                _U64.pack(message.index)
                + _U8.pack(message.rejected)
                + _U64.pack(message.hint_index)
                + _U64.pack(message.hint_term)
            )
        case Heartbeat():
            body = _U64.pack(message.commit_index) + _blob(message.context)
        case HeartbeatResponse():
            body = _blob(message.context)
        case InstallSnapshot():
            body = encode_snapshot(message.snapshot)
    return head + body


def decode(data: bytes) -> Message:
    """Decode one peer message; anything malformed raises ``RaftCodecError``."""
    reader = _Reader(data)
    tag, term, from_id, to_id = reader.unpack(_HEADER)
    if from_id == NO_NODE or to_id == NO_NODE:
        raise RaftCodecError("a Raft message from or to node 0")
    common = {"term": term, "from_id": from_id, "to_id": to_id}
    message: Message
    if tag == 1:
        last_log_index, last_log_term = reader.u64(), reader.u64()
        message = VoteRequest(
            **common, last_log_index=last_log_index, last_log_term=last_log_term, pre_vote=reader.boolean()
        )
    elif tag == 2:
        message = VoteResponse(**common, granted=reader.boolean(), pre_vote=reader.boolean())
    elif tag == 3:
        previous_index, previous_term, commit_index = reader.u64(), reader.u64(), reader.u64()
        entries = _read_entries(reader, previous_index, term)
        message = AppendEntries(
            **common,
            previous_index=previous_index,
            previous_term=previous_term,
            commit_index=commit_index,
            entries=entries,
        )
    elif tag == 4:
        message = AppendEntriesResponse(
            **common, index=reader.u64(), rejected=reader.boolean(), hint_index=reader.u64(), hint_term=reader.u64()
        )
    elif tag == 5:
        message = Heartbeat(**common, commit_index=reader.u64(), context=reader.blob())
    elif tag == 6:
        message = HeartbeatResponse(**common, context=reader.blob())
    elif tag == 7:
        message = InstallSnapshot(**common, snapshot=_read_snapshot(reader))
    else:
        raise RaftCodecError(f"unknown Raft message tag {tag}")
    reader.finish()
    return message
