"""The record a persistent session is stored as in ``__mqtt_sessions``: its state plus its log cursors.

``SessionState.to_bytes()`` holds subscriptions and in-flight flows; the adapter adds where
the session stands in each log partition it reads (the next offset it has not yet taken
into flight; the log is its queue), where its share groups' messages that no member has been
handed yet begin when that is further back (``share_cursors``; absent in older records) and, once
the client is gone, when the session ended so that its expiry survives a broker restart.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mqbroker.errors import CorruptMessageError
from mqbroker.protocols.mqtt.state import (
    load_stored_document,
    stored_base64,
    stored_field,
)

_FORMAT_VERSION = 1

#: A log partition: (log topic, partition).
PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredSession:
    """One record value of the sessions topic (the key is the client id)."""

    state: bytes
    cursors: Mapping[PartitionKey, int] = field(default_factory=dict)
    #: Per log partition where it lies before ``cursors``: the first message of the session's share groups that no
    #: member has been handed yet (``ShareBacklog.unhanded``); its shared subscriptions are read again from there.
    share_cursors: Mapping[PartitionKey, int] = field(default_factory=dict)
    ended_at_ms: int | None = None

    def to_bytes(self) -> bytes:
        """JSON: the state as base64, cursors (and share cursors) as ``[[topic, partition, offset], ...]``."""
        document = {
            "version": _FORMAT_VERSION,
            "state": base64.b64encode(self.state).decode(),
            "cursors": _cursor_list(self.cursors),
            "ended_at_ms": self.ended_at_ms,
        }
        if self.share_cursors:
            document["share_cursors"] = _cursor_list(self.share_cursors)
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> StoredSession:
        """Read a record written by ``to_bytes``; ``CorruptMessageError`` (and nothing else) if it is not one.

        The state stays bytes here: ``SessionState.from_bytes`` checks it.
        """
        where = "stored MQTT session"
        document = load_stored_document(data, _FORMAT_VERSION, where)
        cursors = _cursors_from(stored_field(document, "cursors", list, where), where)
        share_cursors = {}
        if "share_cursors" in document:
            share_cursors = _cursors_from(stored_field(document, "share_cursors", list, where), where)
        ended_at_ms = document.get("ended_at_ms")
        if ended_at_ms is not None:
            ended_at_ms = stored_field(document, "ended_at_ms", int, where)
        elif "ended_at_ms" not in document:
            raise CorruptMessageError(f"{where}: field 'ended_at_ms' is missing")
        return cls(state=stored_base64(document, "state", where), cursors=cursors, share_cursors=share_cursors,
                   ended_at_ms=ended_at_ms)


def _cursor_list(cursors: Mapping[PartitionKey, int]) -> list[list[Any]]:
    return sorted([topic, partition, offset] for (topic, partition), offset in cursors.items())


def _cursors_from(items: list[object], where: str) -> dict[PartitionKey, int]:
    cursors: dict[PartitionKey, int] = {}
    for cursor in items:
        if not (isinstance(cursor, list) and len(cursor) == 3 and isinstance(cursor[0], str)
                and all(type(number) is int and number >= 0 for number in cursor[1:])):
            raise CorruptMessageError(f"{where}: a cursor is not [topic, partition, offset]")
        cursors[(cursor[0], cursor[1])] = cursor[2]
    return cursors
