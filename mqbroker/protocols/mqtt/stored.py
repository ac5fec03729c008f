"""The record a persistent session is stored as in ``__mqtt_sessions``: its state plus its log cursors.

``SessionState.to_bytes()`` holds subscriptions and in-flight flows; the adapter adds where
the session stands in each log partition it reads (the next offset it has not yet taken
into flight; the log is its queue) and, once the client is gone, when the session ended so
that its expiry survives a broker restart.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

_FORMAT_VERSION = 1

#: A log partition: (log topic, partition).
PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredSession:
    """One record value of the sessions topic (the key is the client id)."""

    state: bytes
    cursors: Mapping[PartitionKey, int] = field(default_factory=dict)
    ended_at_ms: int | None = None

    def to_bytes(self) -> bytes:
        """JSON: the state as base64, cursors as ``[[topic, partition, offset], ...]``."""
        document = {
            "version": _FORMAT_VERSION,
            "state": base64.b64encode(self.state).decode(),
            "cursors": sorted([topic, partition, offset] for (topic, partition), offset in self.cursors.items()),
            "ended_at_ms": self.ended_at_ms,
        }
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> StoredSession:
        """Read a record written by ``to_bytes``."""
        document = json.loads(data)
        assert document["version"] == _FORMAT_VERSION, document["version"]
        return cls(
            state=base64.b64decode(document["state"]),
            cursors={(topic, partition): offset for topic, partition, offset in document["cursors"]},
            ended_at_ms=document["ended_at_ms"],
        )
