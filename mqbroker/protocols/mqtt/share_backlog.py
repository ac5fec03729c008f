"""Share groups that fell behind: where each stands in a partition, and handing its kept messages out later.

When no member of a share group has room for a message, the hub keeps the group's position in
that partition instead of forcing the message on a full member; later messages for the group on
that partition are kept too, so order holds. When a member acknowledges (or finishes its own
catch-up) the kept range is read from the log and each message goes to the next member with
room, until the group reaches the shared reader again. Nothing is lost, nothing is delivered twice.

A member whose connection ends with messages of its groups queued (taken from the log, never sent to it) hands
them back (``hand_back``): their offsets are kept, and each is read from the log again and goes to another member of
its group with room, now or at the next ``resume``, with that member's QoS and subscription identifier.

Kept ranges and handed-back offsets live in memory; what survives a broker's death is the persistent members'
session records: a member's cursor stays before its queued messages, its share cursor before its groups' kept and
handed-back messages (``unhanded``), and a member reopened on a broker reads its shared subscriptions' messages
from there up to where that broker's group took over (``had_from``: where the readers stood when the group got its
first member there; ``catch_up.py``). docs/mqtt.md, "What a share group guarantees", says what is not covered.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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
from mqbroker.protocols.mqtt.state import GroupKey, OutboundMessage, Subscription, group_key_of
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
        #: The offsets of the messages members handed back when they left, read from the log again to hand out.
        self._returned: dict[BacklogKey, set[int]] = {}
        #: Where the readers stood in each partition when each share group got its first live member here.
        self._opened_at: dict[GroupKey, dict[PartitionKey, int]] = {}
        self._draining = False

    def holds(self, group: GroupKey, key: PartitionKey) -> bool:
        """Whether the group has messages of ``key`` kept (its next messages wait behind them, in log order)."""
        return bool(self._kept) and (*group, key) in self._kept

    def keep(self, group: GroupKey, key: PartitionKey, offset: int) -> None:
        """No member of ``group`` had room for the message at ``offset``: keep it (and what follows) for later."""
        self._kept.setdefault((*group, key), offset)

    def opened(self, group: GroupKey) -> None:
        """``group`` got its first live member here: from where the readers stand, its messages go to its members."""
        self._opened_at[group] = {key: reader.position for key, reader in self._hub.dispatchers.items()}

    def closed(self, group: GroupKey) -> None:
        """The last live member of ``group`` here left."""
        self._opened_at.pop(group, None)

    def had_from(self, group: GroupKey, key: PartitionKey) -> int:
        """The first offset of ``key`` whose message this hub's ``group`` had (0: a reader started after the group
        opened reads the partition from its start): a member reopened here reads what lies below from its cursor."""
        return self._opened_at.get(group, {}).get(key, 0)

    def unhanded(self, group: GroupKey) -> Iterator[tuple[PartitionKey, int]]:
        """The first offset per partition of ``group``'s kept or handed-back messages: a member's cursor stays
        before them (a broker that dies with them loses none)."""
        for (name, topic_filter, key), offset in self._kept.items():
            if (name, topic_filter) == group:
                yield key, offset
        for (name, topic_filter, key), offsets in self._returned.items():
            if (name, topic_filter) == group:
                yield key, min(offsets)

    def hand_back(self, messages: list[tuple[OutboundMessage, Subscription]]) -> None:
        """A member left with these messages queued for its share groups (each with its group's subscription): the
        groups' other members get them, those with room now, the others as room comes (``resume``)."""
        for message, subscription in messages:
            assert message.position is not None, "a share group's messages come from the log"
            topic, partition, offset = message.position
            self._returned.setdefault((*group_key_of(subscription), (topic, partition)), set()).add(offset)
        self.resume()

    def resume(self) -> None:
        """Hand kept messages to members with room again (a client acknowledged, or caught up)."""
        if (self._kept or self._returned) and not self._draining and not self._hub.stopped:
            self._draining = True
            Deferred.fromCoroutine(self._drain()).addErrback(self._hub.log_failure, "share-group catch-up")

    async def _drain(self) -> None:
        try:
            progressed = True
            while progressed and (self._kept or self._returned) and not self._hub.stopped:
                progressed = False
                for entry in list(self._returned):
                    progressed = await self._drain_returned(entry) or progressed
                for entry in list(self._kept):
                    progressed = await self._drain_entry(entry) or progressed
        finally:
            self._draining = False

    async def _drain_returned(self, entry: BacklogKey) -> bool:
        """Read one fetch from a group's first handed-back message; False when nothing could be handed out."""
        hub, key, offsets = self._hub, entry[2], self._returned[entry]
        start = min(offsets)
        (result,) = await hub.broker.fetch(FRONT_END_PRINCIPAL, read_from(key, start))
        if isinstance(result.error, errors.OffsetOutOfRangeError):
            restart = await hub.restart_position(key, start)
            # retention moved the log's start past some; or a crash took back the tail they were in (``restart_position``)
            self._forget_returned(entry, {offset for offset in offsets if offset < restart} if restart > start
                                  else set(offsets))
            return True
        if result.error is not None:
            self.log.warn("handing back share-group messages of {key}: {error}", key=key, error=result.error)
            return False  # tried again at the next acknowledgement
        with hub.batched_writes():
            return self._hand_out_returned(entry, offsets, result.records, start, result.aborted_transactions)

    def _hand_out_returned(self, entry: BacklogKey, offsets: set[int], data: bytes, start: int,
                           aborted: Iterable[AbortedTransaction] | None) -> bool:
        """Each handed-back message of one fetch to the next member of its group with room, in log order."""
        hub = self._hub
        group_key, key = (entry[0], entry[1]), entry[2]
        registry, connections = hub.registry, hub.connections
        handed = False
        for record in hub.rows_after(key, data, start, aborted):
            if record.offset not in offsets:
                continue
            message = message_of(record, key)
            if message is not None:
                members = registry.group_members(message.topic, group_key)
                chosen = members and registry.choose(group_key, members,
                                                     lambda client_id, _: connections[client_id].has_room())
                if not chosen:
                    return handed
                connections[chosen[0]].deliver(message, [chosen[1]])
                handed = True
            offsets.discard(record.offset)
        # what the fetch passed over is not readable any more (a batch skipped as unreadable, an aborted transaction)
        reached = next_offset_after(data, start)
        passed = {offset for offset in offsets if offset < reached}
        self._forget_returned(entry, passed)
        return handed or bool(passed)

    def _forget_returned(self, entry: BacklogKey, offsets: set[int]) -> None:
        returned = self._returned[entry]
        returned -= offsets
        if not returned:
            del self._returned[entry]

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
                connections[chosen[0]].deliver(message, [chosen[1]])
            self._kept[entry] = record.offset + 1
        reached = min(max(next_offset_after(data, offset), self._kept[entry]), limit)
        if reached >= limit:  # caught up with the shared reader
            del self._kept[entry]
        else:  # read on (nothing read: what is below the reader is not durable yet, the next long poll waits)
            self._kept[entry] = reached
        return True
