"""Where one MQTT session stands in each log partition, and its own reads of the partitions it fell behind on.

Deliveries come from the hub's shared log readers while the session keeps up ("live"). A session
whose window is full, or that reconnects with a stored position, reads the log itself from its
cursor ("catching up") until it reaches the shared readers again; meanwhile they skip it for
that partition. A shared subscription's messages go to the session only below where this broker's
share group took over (``ShareBacklog.had_from``: from there on the group hands them out, and catches
up as a group, ``share_backlog.py``): a member reopened here after its broker died, or after its group
had no member here, gets what its cursor holds and nobody here had.

A session reopened on another broker may stand further on in a partition than this broker's shared
reader (that reader's fetch had not come back when the session's old broker died): the shared reader
then passes over what lies below the session's stored cursor, and the messages the session resends
under their packet ids, when it gets to them (``passes_over``); nothing goes to the client twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import errors, limits
from mqbroker.model import AbortedTransaction
from mqbroker.protocols.mqtt.headers import message_from_record
from mqbroker.protocols.mqtt.hub import MqttHub
from mqbroker.protocols.mqtt.readers import (
    FRONT_END_PRINCIPAL,
    RETRY_DELAY_S,
    read_from,
)
from mqbroker.protocols.mqtt.session import ConnectionState, MqttSession
from mqbroker.protocols.mqtt.state import LogPosition, OutboundMessage, SessionState, Subscription, group_key_of
from mqbroker.protocols.mqtt.stored import PartitionKey, StoredSession
from mqbroker.protocols.mqtt.topics import topic_matches
from mqbroker.records.readable import next_offset_after

log = Logger()
#: A session's subscriptions matching an MQTT topic: the plain ones, and each shared one with where its group took over.
_Matching = tuple[list[Subscription], list[tuple[Subscription, int]]]


class Deliverer(Protocol):
    """What catching up needs of its connection (``server.MqttConnection``)."""

    session: MqttSession

    @property
    def deliveries_held(self) -> bool: ...

    @property
    def under_fetch_quota(self) -> bool: ...

    def deliver_many(self, deliveries: Iterable[tuple[OutboundMessage, list[Subscription]]]) -> None: ...

    def log_failure(self, failure: Failure, what: str) -> None: ...


class CatchUp:
    """One session's cursors: the partitions it reads itself, and where the shared readers stand in the others."""

    def __init__(self, hub: MqttHub, connection: Deliverer) -> None:
        self._hub = hub
        self._connection = connection
        #: Partitions this session reads itself, and from where (the adapter reads it: nothing to resume when empty).
        self.behind: dict[PartitionKey, int] = {}
        #: Where the messages a reopened session resends are: a cursor stored by an older version may be below them,
        #: and reading them again must not deliver them a second time.
        self._resent: set[LogPosition] = set()
        #: Partitions where a reopened session stands further on than the shared reader, and where it stands: the
        #: shared reader's records below that went to the session on its previous broker.
        self._ahead: dict[PartitionKey, int] = {}
        #: Partitions read from a share cursor before the stored cursor, and that cursor: the plain subscriptions'
        #: messages below it went to the session before.
        self._plain_from: dict[PartitionKey, int] = {}
        self._running = False
        #: Bytes per record of the last catch-up read (0: none yet), which sizes the next (``_fetch_bytes``).
        self._record_bytes = 0
        #: Whether the last fetch's deliveries stopped before its end (the shared reader's position, a full window).
        self._stopped = False

    def is_behind(self, partition_key: PartitionKey) -> bool:
        """Whether the session reads ``partition_key`` itself (the shared reader skips it)."""
        return partition_key in self.behind

    def passes_over(self, partition_key: PartitionKey, offset: int) -> bool:
        """Whether the shared reader's record at ``offset`` is not for this session: it reads ``partition_key``
        itself, or it had the record already (below where it stood when it was reopened, or resent in flight).
        The shared reader offers a partition's records in log order."""
        if partition_key in self.behind:
            return True
        ahead = self._ahead
        if ahead and partition_key in ahead:
            if offset < ahead[partition_key]:
                return True
            del ahead[partition_key]  # the shared reader has reached where the session stood
        return bool(self._resent) and self._was_resent(partition_key, offset)

    def stood_past(self, partition_key: PartitionKey, offset: int) -> bool:
        """Whether the session, reopened here, stood past ``offset`` of ``partition_key`` on its previous broker (that
        broker's readers had handed the record out, to it or to another member of its share groups there)."""
        ahead = self._ahead
        return bool(ahead) and offset < ahead.get(partition_key, 0)

    def fall_behind(self, partition_key: PartitionKey, offset: int) -> None:
        """The session could not take the shared reader's message at ``offset``: read from there itself."""
        self.behind[partition_key] = offset

    def start_from(self, stored: StoredSession, resent: Iterable[LogPosition]) -> None:
        """A reopened session reads every partition from its stored cursor, or from its share cursor where that is
        further back (then only its shared subscriptions' messages below the cursor); a partition it does not know
        was added after: everything in it is new to the session. It passes over the ``resent`` messages."""
        cursors, share_cursors = stored.cursors, stored.share_cursors
        self.behind = {key: min(cursors.get(key, 0), share_cursors.get(key, cursors.get(key, 0)))
                        for key in self._hub.dispatchers}
        self._plain_from = {key: cursors.get(key, 0) for key, offset in share_cursors.items()
                            if offset < cursors.get(key, 0)}
        # below its cursor nothing is read again: only a resent message at or past it could come twice
        self._resent = {position for position in resent if position[2] >= self.behind.get(position[:2], 0)}
        self._ahead = {}

    def start_live(self) -> None:
        """A clean start reads from now on."""
        self.behind = {}
        self._plain_from = {}
        self._resent = set()
        self._ahead = {}

    def stored(self, state: bytes, ended_at_ms: int | None = None) -> StoredSession:
        """The session's record: its ``state`` with its cursors as of now."""
        cursors = self.cursors()
        return StoredSession(state=state, cursors=cursors, share_cursors=self._share_cursors(cursors),
                             ended_at_ms=ended_at_ms)

    def cursors(self) -> dict[PartitionKey, int]:
        """Per log partition, the first offset this session has not yet taken into flight: where it reads, or the
        lowest of its messages still in the pending queue (the stored state holds only what is in flight). A
        message's position says where it is; one from the retained store has none."""
        cursors = {key: self._hub.live_position(key) for key in self._hub.dispatchers}
        for key, offset in self._ahead.items():
            cursors[key] = max(cursors[key], offset)
        cursors.update(self.behind)
        state = self._connection.session.session
        for message in state.pending if state is not None else ():
            position = message.position
            if position is not None:
                key = position[0], position[1]
                if position[2] < cursors.get(key, position[2]):
                    cursors[key] = position[2]
        return cursors

    def _share_cursors(self, cursors: Mapping[PartitionKey, int]) -> dict[PartitionKey, int]:
        """Where the messages of this session's share groups that no member here has been handed yet (kept, or
        handed back) begin, per partition where that is before ``cursors``."""
        state = self._connection.session.session
        share_cursors: dict[PartitionKey, int] = {}
        if state is None:
            return share_cursors
        backlog = self._hub.share_backlog
        for group in {group_key_of(subscription) for subscription in state.subscriptions.values()
                      if subscription.share_group is not None}:
            for key, offset in backlog.unhanded(group):
                if offset < share_cursors.get(key, cursors.get(key, offset + 1)):
                    share_cursors[key] = offset
        return share_cursors

    def resume(self) -> None:
        """Read on from the cursors while the session has room (once its queue has drained to half)."""
        session = self._connection.session
        if self.behind and not self._running and session.state is ConnectionState.CONNECTED and session.wants_refill:
            self._running = True
            Deferred.fromCoroutine(self._run()).addErrback(self._connection.log_failure, "catching up from the log")

    async def _run(self) -> None:
        """Read the partitions this session is behind on until it reaches the shared readers."""
        session, hub = self._connection.session, self._hub
        try:
            while (self.behind and session.state is ConnectionState.CONNECTED and session.accepting_deliveries
                   and not self._connection.deliveries_held):
                key, offset = next(iter(self.behind.items()))
                if offset >= hub.live_position(key):
                    await self._rejoin(key, offset)
                    continue
                # a long poll: the shared reader may be past the durable end (``MqttHub.appended``)
                (result,) = await hub.broker.fetch(FRONT_END_PRINCIPAL, read_from(
                    key, offset, limits.mqtt_log_fetch_wait_ms_max, self._fetch_bytes()))
                if result.error is not None:
                    await self._read_failed(key, offset, result.error)
                    continue
                if key in self.behind and session.state is ConnectionState.CONNECTED:
                    with hub.batched_writes():  # one socket write for what a fetch delivers, not one per message
                        self._records(key, result.records, offset, result.aborted_transactions)
        finally:
            self._running = False
            hub.resume_share_groups()  # this member may have room for its groups' kept messages again

    def _fetch_bytes(self) -> int:
        """What a catch-up read asks for: twice what the session's queue has room for, at the last read's bytes per
        record (the read starts inside a batch and ends at a whole one: asked for exactly that, a refill would often
        take two reads), within ``limits.mqtt_catch_up_fetch_bytes_min`` and ``limits.mqtt_log_fetch_bytes_max``."""
        state = self._connection.session.session
        if not self._record_bytes or state is None:
            return limits.mqtt_log_fetch_bytes_max
        room = state.pending_messages_max - len(state.pending)
        wanted = min(limits.mqtt_log_fetch_bytes_max, 2 * room * self._record_bytes)
        return max(limits.mqtt_catch_up_fetch_bytes_min, wanted)

    async def _rejoin(self, key: PartitionKey, offset: int) -> None:
        """The session has read ``key`` up to the shared reader's position, or stands further on: the shared reader
        hands it what follows. Further on (a session reopened here, whose previous broker's reader was ahead of this
        one's), the shared reader passes over what lies below ``offset``, if the log still has it: a log that lost
        its tail in a failover (``mqtt_puback = "written"``) is read on from its end."""
        hub = self._hub
        if offset > hub.live_position(key):
            (result,) = await hub.broker.fetch(FRONT_END_PRINCIPAL, read_from(key, offset))
            if result.error is not None:
                await self._read_failed(key, offset, result.error)
                return
            if offset <= hub.live_position(key):
                return  # the shared reader got there meanwhile: read up to it (the next round)
            self._ahead[key] = offset
        del self.behind[key]

    async def _read_failed(self, key: PartitionKey, offset: int, error: Exception) -> None:
        """A read of ``key`` at ``offset`` failed. Outside the log (retention, or a tail lost in a failover) it goes on
        where the log is; any other error (the partition's leader is moving) is tried again from ``offset`` after
        ``RETRY_DELAY_S``, after the other partitions: reading from anywhere else would deliver again what the
        session had, or lose messages."""
        if isinstance(error, errors.OffsetOutOfRangeError):
            self.behind[key] = await self._hub.restart_position(key, offset)
            return
        log.warn("MQTT catch-up of {key} from {offset}: {error}", key=key, offset=offset, error=error)
        self.behind[key] = self.behind.pop(key, offset)  # last in line: one partition's trouble holds no other back
        await deferLater(self._hub.reactor, RETRY_DELAY_S)

    def _was_resent(self, key: PartitionKey, offset: int) -> bool:
        """Whether the record at ``offset`` of ``key`` is in flight already (resent under its packet id); once."""
        position = (key[0], key[1], offset)
        if position in self._resent:
            self._resent.discard(position)
            return True
        return False

    def _records(self, key: PartitionKey, data: bytes, offset: int,
                 aborted: Iterable[AbortedTransaction] | None) -> None:
        limit = self._hub.live_position(key)
        self._stopped = False
        self._connection.deliver_many(self._deliveries(key, data, offset, aborted, limit))
        end = next_offset_after(data, offset)
        if end > offset:  # from the batch holding ``offset``: at most a batch's records before it count too
            self._record_bytes = -(-len(data) // (end - offset))
        if self._stopped:
            return
        reached = min(max(end, self.behind[key]), limit)
        if reached >= limit:  # caught up with the shared reader
            del self.behind[key]
        else:  # read on (nothing read: what is below the reader is not durable yet, the next long poll waits)
            self.behind[key] = reached

    def _deliveries(self, key: PartitionKey, data: bytes, offset: int, aborted: Iterable[AbortedTransaction] | None,
                    limit: int) -> Iterator[tuple[OutboundMessage, list[Subscription]]]:
        """The messages of one fetch this session is to get, each yielded once the one before it was taken (the
        cursor moves past it then); it stops (``_stopped``) at the shared reader's position or at a full window."""
        connection = self._connection
        session = connection.session
        log_topic, partition = key
        matching: dict[str, _Matching] = {}  # by MQTT topic: the subscriptions cannot change meanwhile
        held = connection.deliveries_held
        # Without a fetch quota nothing this hands over can hold deliveries; under one, each delivery goes out on its
        # own (``deliver_many``) and may: the next waits for the release then.
        held_anew = connection.under_fetch_quota
        plain_from = self._plain_from.get(key, 0)
        state = session.session
        # ``SessionState.has_room`` without a call per record (the session cannot change meanwhile)
        pending, pending_max = (state.pending, state.pending_messages_max) if state is not None else ((), 0)
        for record in self._hub.rows_after(key, data, offset, aborted):
            record_offset = record.offset
            if record_offset >= limit:
                self._stopped = True
                return
            delivery = None
            if not (self._resent and self._was_resent(key, record_offset)):
                # topic and metadata come from headers.py's cache of record shapes
                message = message_from_record(record.key, record.value, record.headers, record.timestamp_ms,
                                              (log_topic, partition, record_offset))
                subscriptions = None
                if message is not None and state is not None:
                    found = matching.get(message.topic)
                    if found is None:
                        found = matching[message.topic] = self._matching(state, key, message.topic)
                    subscriptions, shared = found
                    if record_offset < plain_from:
                        subscriptions = []
                    if shared:  # below where this broker's group took over, nobody here had the message
                        subscriptions = subscriptions + [subscription for subscription, had_from in shared
                                                         if record_offset < had_from]
                if subscriptions:
                    assert message is not None and state is not None
                    if held or (message.qos and len(pending) >= pending_max):
                        self._stopped = True
                        return
                    delivery = message, subscriptions
            # past it before it is handed over: a session write its delivery starts stores the cursor past it
            self.behind[key] = record_offset + 1
            if delivery is not None:
                yield delivery
                if held_anew:
                    held = connection.deliveries_held

    def _matching(self, state: SessionState, key: PartitionKey, topic: str) -> _Matching:
        """The session's plain subscriptions matching ``topic``, and its shared ones with where their groups here
        took over ``key`` (``ShareBacklog.had_from``)."""
        plain: list[Subscription] = []
        shared: list[tuple[Subscription, int]] = []
        for subscription in state.subscriptions.values():
            if subscription.share_group is None:
                if topic_matches(subscription.topic_filter, topic):
                    plain.append(subscription)
            else:
                group = group_key_of(subscription)
                if topic_matches(group[1], topic):
                    shared.append((subscription, self._hub.share_backlog.had_from(group, key)))
        return plain, shared
