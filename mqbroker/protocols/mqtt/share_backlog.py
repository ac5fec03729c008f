"""Share groups that fell behind: where each stands in a partition, and handing its kept messages out later.

When no member of a share group has room for a message, the hub keeps the group's position in
that partition instead of forcing the message on a full member; later messages for the group on
that partition are kept too, so order holds. When a member acknowledges (or finishes its own
catch-up) the kept range is read from the log and each message goes to the next member with
room, until the group reaches the shared reader again. Nothing is lost, nothing is delivered twice.

A member whose connection ends with messages of its groups queued (taken from the log, never sent to it) hands
them back (``hand_back``): each goes to another member of its group with room, now or at the next ``resume``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from mqbroker import errors, limits
from mqbroker.model import AbortedTransaction
from mqbroker.protocols.mqtt.readers import (
    FRONT_END_PRINCIPAL,
    message_of,
    read_from,
)
from mqbroker.protocols.mqtt.registry import GroupKey, group_key_of
from mqbroker.protocols.mqtt.state import OutboundMessage, Subscription
from mqbroker.protocols.mqtt.stored import PartitionKey
from mqbroker.records.readable import next_offset_after

if TYPE_CHECKING:
    from mqbroker.protocols.mqtt.hub import MqttHub

#: A share group's kept messages in one partition: (group, topic filter, partition).
BacklogKey = tuple[str, str, PartitionKey]


class ShareBacklog:
    """The share groups none of whose members had room, and the first offset of each not handed out yet."""

    log = Logger()

    def __init__(self, hub: MqttHub) -> None:
        self._hub = hub
        self._kept: dict[BacklogKey, int] = {}
        #: Messages members handed back when they left, by share group, oldest first: in memory, as they were.
        self._returned: dict[GroupKey, deque[OutboundMessage]] = {}
        self._draining = False

    def holds(self, group: GroupKey, key: PartitionKey) -> bool:
        """Whether the group has messages of ``key`` kept (its next messages wait behind them, in log order)."""
        return bool(self._kept) and (*group, key) in self._kept

    def keep(self, group: GroupKey, key: PartitionKey, offset: int) -> None:
        """No member of ``group`` had room for the message at ``offset``: keep it (and what follows) for later."""
        self._kept.setdefault((*group, key), offset)

    def hand_back(self, messages: list[tuple[OutboundMessage, Subscription]]) -> None:
        """A member left with these messages queued for its share groups (each with its group's subscription): the
        groups' other members get them, those with room now, the others as room comes (``resume``)."""
        for message, subscription in messages:
            self._returned.setdefault(group_key_of(subscription), deque()).append(message)
        self.resume()

    def resume(self) -> None:
        """Hand kept messages to members with room again (a client acknowledged, or caught up)."""
        if self._returned and not self._hub.stopped:
            with self._hub.batched_writes():
                self._hand_out_returned()
        if self._kept and not self._draining and not self._hub.stopped:
            self._draining = True
            Deferred.fromCoroutine(self._drain()).addErrback(self._hub.log_failure, "share-group catch-up")

    async def _drain(self) -> None:
        try:
            progressed = True
            while progressed and self._kept and not self._hub.stopped:
                progressed = False
                for entry in list(self._kept):
                    progressed = await self._drain_entry(entry) or progressed
        finally:
            self._draining = False

    async def _drain_entry(self, entry: BacklogKey) -> bool:
        """Read one fetch of a group's kept messages; False when no member had room for the next one."""
        hub = self._hub
        key = entry[2]
        offset = self._kept[entry]
        if offset >= hub.live_position(key):
            del self._kept[entry]
            return True
        # a long poll: the shared reader may be past the durable end (``MqttHub.appended``)
        (result,) = await hub.broker.fetch(FRONT_END_PRINCIPAL, read_from(key, offset, limits.mqtt_log_fetch_wait_ms_max))
        if isinstance(result.error, errors.OffsetOutOfRangeError):  # retention, or a crash, moved the log past them
            self._kept[entry] = await hub.restart_position(key, offset)
            return True
        if result.error is not None:
            self.log.warn("share-group catch-up of {key}: {error}", key=key, error=result.error)
            return False  # tried again at the next acknowledgement
        with hub.batched_writes():
            return self._hand_out(entry, result.records, offset, result.aborted_transactions)

    def _hand_out(self, entry: BacklogKey, data: bytes, offset: int,
                  aborted: Iterable[AbortedTransaction] | None) -> bool:
        hub = self._hub
        group_key, key = (entry[0], entry[1]), entry[2]
        limit = hub.live_position(key)
        connections = hub.connections
        for record in hub.rows_after(key, data, offset, aborted):
            if record.offset >= limit:
                break
            message = message_of(record, key)
            members = hub.registry.group_members(message.topic, group_key) if message is not None else []
            if members:
                chosen = hub.registry.choose(group_key, members, lambda client_id, _: connections[client_id].has_room())
                if chosen is None:
                    return self._kept[entry] > offset
                connections[chosen[0]].deliver_shared(key, record.offset, message, chosen[1])  # type: ignore[arg-type]
            self._kept[entry] = record.offset + 1
        reached = min(max(next_offset_after(data, offset), self._kept[entry]), limit)
        if reached >= limit:  # caught up with the shared reader
            del self._kept[entry]
        else:  # read on (nothing read: what is below the reader is not durable yet, the next long poll waits)
            self._kept[entry] = reached
        return True

    def _hand_out_returned(self) -> None:
        """Each handed-back message to the next member of its group with room, oldest first, while there is room."""
        registry, connections = self._hub.registry, self._hub.connections
        for group_key, messages in list(self._returned.items()):
            while messages:
                message = messages[0]
                members = registry.group_members(message.topic, group_key)
                chosen = members and registry.choose(group_key, members,
                                                     lambda client_id, _: connections[client_id].has_room())
                if not chosen:
                    break
                messages.popleft()
                assert message.position is not None, "a share group's messages come from the log"
                topic, partition, offset = message.position
                connections[chosen[0]].deliver_shared((topic, partition), offset, message, chosen[1])
            if not messages:
                del self._returned[group_key]
