"""The record a connected client's will is stored as in ``__mqtt_wills`` (keyed by client id), so that
another broker can publish it when the client's broker dies: the will's log write, its retain (if the
will is retained) and its delay, or, once its client's connection has ended and the delay has begun, the
wall-clock time it is due. Pure: JSON in, a typed ``CorruptMessageError`` for anything else.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from mqbroker.errors import CorruptMessageError
from mqbroker.protocols.mqtt.actions import PublishToLog, Retain, ScheduleWill
from mqbroker.protocols.mqtt.state import load_stored_document, stored_base64, stored_field

_FORMAT_VERSION = 1
_WHERE = "stored MQTT will"


def _encode(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _headers(document: object, where: str) -> tuple[tuple[str, bytes], ...]:
    headers = []
    for entry in stored_field(document, "headers", list, where):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
            raise CorruptMessageError(f"{where}: a header is not [name, base64 value]")
        headers.append((entry[0], stored_base64({"value": entry[1]}, "value", where)))
    return tuple(headers)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredWill:
    """A will as it would go out: ``delay_ms`` after its client's connection is found gone, or at ``due_at_ms``
    once that delay has begun (the connection ended)."""

    delay_ms: int
    write: PublishToLog
    retain: Retain | None = None
    #: The wall-clock time (ms) the will is due; None while its client is still connected.
    due_at_ms: int | None = None

    @classmethod
    def of(cls, will: ScheduleWill, now_ms: int) -> StoredWill:
        """The stored form of a will the session would schedule at ``now_ms``."""
        writes = [action for action in will.actions if isinstance(action, PublishToLog)]
        retains = [action for action in will.actions if isinstance(action, Retain)]
        assert len(writes) == 1 and len(retains) <= 1, "a will is one log write and at most one retain"
        return cls(delay_ms=max(0, will.at_ms - now_ms), write=writes[0], retain=retains[0] if retains else None)

    @classmethod
    def begun(cls, will: ScheduleWill, now_ms: int) -> StoredWill:
        """The stored form of a will whose delay has begun: it is due at ``will.at_ms`` wherever it is published."""
        return dataclasses.replace(cls.of(will, now_ms), due_at_ms=will.at_ms)

    def schedule(self, client_id: str, now_ms: int) -> ScheduleWill:
        """The will to publish: at its due time if its delay has begun, else its delay counted from ``now_ms``."""
        actions: tuple[PublishToLog | Retain, ...] = (self.write,) if self.retain is None else (self.write, self.retain)
        at_ms = now_ms + self.delay_ms if self.due_at_ms is None else self.due_at_ms
        return ScheduleWill(client_id=client_id, at_ms=at_ms, actions=actions)

    def to_bytes(self) -> bytes:
        """JSON with base64 bytes."""
        document: dict[str, Any] = {
            "version": _FORMAT_VERSION,
            "delay_ms": self.delay_ms,
            "log_topic": self.write.log_topic,
            "key": _encode(self.write.key),
            "payload": _encode(self.write.payload),
            "headers": [[name, _encode(value)] for name, value in self.write.headers],
            "retain_topic": None if self.retain is None else self.retain.topic,
            "due_at_ms": self.due_at_ms,
        }
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> StoredWill:
        """Read a record written by ``to_bytes``; ``CorruptMessageError`` (and nothing else) if it is not one."""
        document = load_stored_document(data, _FORMAT_VERSION, _WHERE)
        headers = _headers(document, _WHERE)
        payload = stored_base64(document, "payload", _WHERE)
        write = PublishToLog(ticket=None, log_topic=stored_field(document, "log_topic", str, _WHERE),
                             key=stored_base64(document, "key", _WHERE), payload=payload, headers=headers)
        if "retain_topic" not in document:
            raise CorruptMessageError(f"{_WHERE}: field 'retain_topic' is missing")
        retain_topic = document["retain_topic"]
        retain = None
        if retain_topic is not None:
            retain = Retain(topic=stored_field(document, "retain_topic", str, _WHERE), payload=payload, headers=headers)
        due_at_ms = None  # absent in records written before delayed wills were stored
        if document.get("due_at_ms") is not None:
            due_at_ms = stored_field(document, "due_at_ms", int, _WHERE, minimum=0)
        return cls(delay_ms=stored_field(document, "delay_ms", int, _WHERE, minimum=0), write=write, retain=retain,
                   due_at_ms=due_at_ms)
