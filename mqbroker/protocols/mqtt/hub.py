"""What all MQTT connections of one listener share: the live subscriptions, retained messages,
stored sessions, wills, the client-id registry and one log reader per log partition.

Twisted side of the MQTT front end, talking to the core only through ``IBroker``:

* one ``PartitionDispatcher`` (``readers.py``) per partition of every mapped log topic
  long-polls ``broker.fetch`` from the log end; the hub fans each record out to the live
  sessions whose subscriptions match its key (one trie for all sessions, never a fetch per
  session), keeping a share group's messages back when no member has room (``share_backlog.py``);
  with ``mqtt_puback = "written"`` what this front end appends at a reader's position goes out from
  memory right after the append, before its fsync (``appended``), and the reader skips it;
* retained messages and persistent sessions live in compacted internal topics
  (``__mqtt_retained`` keyed by MQTT topic, ``__mqtt_sessions`` keyed by client id),
  replayed into memory at start and followed afterwards (``followers.py``): what another broker's
  hub writes is in force here too, and a session moves to whichever broker its client connects to
  (``session_directory.py`` keeps where each session is);
* the wills of connected clients are stored in ``__mqtt_wills`` so that a survivor publishes them
  when their broker dies (``cluster_wills.py``);
* ``$SYS/broker/...`` statistics are published every ``SYS_INTERVAL_S`` (in memory only);
* partitions added to a log topic later get their reader within ``PARTITION_REFRESH_S``;
* the mapping rules are the cluster's (``mapping_rules.py``): when they change, every session uses the
  new ones at once and the log topics they add get readers from the time the rules were set;
* a batch whose records do not decode is counted, logged and skipped (``records_after``):
  every reader goes on after it.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import __version__, errors
from mqbroker.interfaces import IBroker, IGenericRecords
from mqbroker.limits import produce_timeout_ms_default
from mqbroker.model import (
    AbortedTransaction,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Acks,
    TopicSpec,
)
from mqbroker.protocols.mqtt.actions import PublishToLog, Retain, ScheduleWill
from mqbroker.protocols.mqtt.cluster_wills import WILLS_TOPIC, ClusterWills
from mqbroker.protocols.mqtt.followers import BROKER_HEADER, HUB_HEADER, StateFollower, written_by
from mqbroker.protocols.mqtt.headers import message_from_record
from mqbroker.protocols.mqtt.hub_connection import Connection, LiveOffer
from mqbroker.protocols.mqtt.mapping_rules import ClusterMappingRules
from mqbroker.protocols.mqtt.packets import ReasonCode
from mqbroker.protocols.mqtt.readers import (
    FRONT_END_PRINCIPAL,
    PartitionDispatcher,
    RecordRow,
    decode_record_rows,
    message_of,
    read_from,
)
from mqbroker.protocols.mqtt.registry import SubscriptionRegistry
from mqbroker.protocols.mqtt.retained import RetainedStore
from mqbroker.protocols.mqtt.session_directory import SESSIONS_TOPIC, SessionDirectory, single_record_batch
from mqbroker.protocols.mqtt.share_backlog import ShareBacklog
from mqbroker.protocols.mqtt.state import GroupKey, OutboundMessage, Subscription, group_key_of
from mqbroker.protocols.mqtt.stored import PartitionKey, StoredSession
from mqbroker.protocols.mqtt.topics import TopicMapping, record_key
from mqbroker.protocols.startup import StartedSignal
from mqbroker.records.readable import (
    SKIPPED_LOG_FORMAT,
    UnreadableBatch,
    UnreadableTally,
    next_offset_after,
    readable_batches,
    readable_records,
)
from mqbroker.records.record import Record

RETAINED_TOPIC = "__mqtt_retained"
SYS_INTERVAL_S = 10.0
#: How often the log topics' partition counts are checked (a grown topic gets readers for its new partitions).
PARTITION_REFRESH_S = 5.0
#: Pause before a will whose write failed (no in-sync replicas, a leader moving) is written again.
WILL_RETRY_S = 1.0
_COMPACTED = {"cleanup.policy": "compact"}
#: The log topics the hub decodes: a client's produce whose records do not decode is refused.
_DECODED = {"record.validation": "decode"}


def reason_code_for(failure: Failure) -> ReasonCode:
    """The MQTT reason code that reports a failed log write."""
    if failure.check(errors.TopicAuthorizationError):
        return ReasonCode.NOT_AUTHORIZED
    return ReasonCode.UNSPECIFIED_ERROR


#: What a QoS 1/2 publish waits for before it is acknowledged, by ``mqtt_puback`` (docs/mqtt.md "When PUBACK is sent").
PUBACK_ACKS = {"durable": Acks.ALL, "written": Acks.NONE}


class _BatchedWrites:
    """``MqttHub.batched_writes``: corks the hub's connections unless an enclosing block already did, and uncorks
    them at the end of the block that corked. A plain class: every append enters one, and a generator-based context
    manager cost that path a generator per append."""

    __slots__ = ("_hub", "_corked_here")

    def __init__(self, hub: MqttHub) -> None:
        self._hub = hub
        self._corked_here = False

    def __enter__(self) -> None:
        hub = self._hub
        self._corked_here = not hub.corked
        hub.corked = True

    def __exit__(self, *exc_info: object) -> None:
        if self._corked_here:
            self._hub._uncork()


class MqttHub:
    """State shared by every connection of one MQTT listener (see the module docstring)."""

    log = Logger()

    def __init__(self, broker: IBroker, reactor: IReactorTime, mapping: TopicMapping,
                 unreadable: UnreadableTally | None = None, log_partitions: int = 0, node_id: int | None = None,
                 records: IGenericRecords | None = None, puback_acks: Acks = Acks.ALL) -> None:
        """``unreadable`` counts the batches the readers skip (the broker's metric); ``log_partitions``: of the
        log topics it creates (0: one per broker of the cluster); ``node_id``: this broker's, named in the
        session records it writes; ``records``: the cluster metadata, where the mapping rules set at run time
        are (``mapping`` holds the configured ones); ``puback_acks``: what a QoS 1/2 publish waits for before its
        PUBACK/PUBREC (``PUBACK_ACKS``: ALL for ``mqtt_puback = "durable"``, NONE for ``"written"``)."""
        self.broker = broker
        self.puback_acks = puback_acks
        #: ``written``: what this front end appends goes to live subscribers from memory at once (``appended``), not
        #: after the fsync; ``durable``: live subscribers get it from the shared readers, once it is durable.
        self.delivers_on_append = puback_acks is Acks.NONE
        self.node_id = node_id
        self._log_partitions = log_partitions
        self.unreadable = unreadable or UnreadableTally()
        self.reactor = reactor
        self.mapping = mapping
        self.registry = SubscriptionRegistry()
        self.retained = RetainedStore()
        self.connections: dict[str, Connection] = {}
        self.dispatchers: dict[PartitionKey, PartitionDispatcher] = {}
        self.stopped = False
        #: While True, connections queue their writes and are flushed once the whole batch is out.
        self.corked = False
        self._to_flush: set[Connection] = set()
        #: Share groups none of whose members had room, and where each stands.
        self.share_backlog = ShareBacklog(self)
        self.statistics = {"messages/received": 0, "messages/sent": 0, "bytes/received": 0, "bytes/sent": 0}
        self._partition_counts: dict[str, int] = {}
        #: Wills waiting for their delay, by client id: the timer that publishes each and the will.
        self._will_timers: dict[str, tuple[IDelayedCall, ScheduleWill]] = {}
        #: Names this hub's session and retained records (``followers.py``); new at every start.
        self.instance = uuid.uuid4().hex.encode()
        #: The headers of the session and retained records this hub writes: its instance and broker.
        self.own_header = ((HUB_HEADER, self.instance),) + (
            () if node_id is None else ((BROKER_HEADER, str(node_id).encode()),))
        #: Persistent sessions, offline here or live anywhere in the cluster.
        self.sessions = SessionDirectory(self)
        #: Wills of the clients connected anywhere, published here if their broker dies.
        self.wills = ClusterWills(self)
        #: The mapping rules in force cluster-wide (configured, or set through the admin API).
        self.mapping_rules = ClusterMappingRules(self, records, mapping.rules)
        #: Fires once ``start`` has finished; connections wait for it before their CONNACK.
        self.started = StartedSignal(reactor, "MQTT front end")
        self._started_s = reactor.seconds()
        self._sys_loop = LoopingCall(self.publish_sys)
        self._sys_loop.clock = reactor
        self._partition_loop = LoopingCall(lambda: Deferred.fromCoroutine(self.refresh_partitions()))
        self._partition_loop.clock = reactor

    def now_ms(self) -> int:
        """The reactor's clock in milliseconds."""
        return int(self.reactor.seconds() * 1000)

    # ------------------------------------------------------------------ start-up

    async def start(self) -> None:
        """Create the topics, replay retained messages and sessions, start the log readers.

        Retried while the cluster is still forming (``start_with_retries``); clients that connect
        meanwhile wait for it (``started``).
        """
        await self.started.run(self._load, self.log, lambda: self.stopped)

    async def _load(self) -> None:
        """One start attempt: every broker call first, the hub's state changes only once all succeeded."""
        log_topics = self._log_topics()
        for name in (RETAINED_TOPIC, SESSIONS_TOPIC, WILLS_TOPIC):  # they wait for all their replicas' brokers
            await self._ensure_topic(name, _COMPACTED)
        await self.create_log_topics(log_topics)
        cluster = await self.broker.metadata(FRONT_END_PRINCIPAL, log_topics, False)
        partition_counts = {topic.name: len(topic.partitions) for topic in cluster.topics}
        ends = {topic: await self.offset_of((topic, 0), LATEST_TIMESTAMP)
                for topic in (RETAINED_TOPIC, SESSIONS_TOPIC, WILLS_TOPIC)}
        retained = [record async for record in self._replay(RETAINED_TOPIC, ends[RETAINED_TOPIC])]
        sessions = [record async for record in self._replay(SESSIONS_TOPIC, ends[SESSIONS_TOPIC])]
        wills = [record async for record in self._replay(WILLS_TOPIC, ends[WILLS_TOPIC])]
        log_ends = {(topic, partition): await self.offset_of((topic, partition), LATEST_TIMESTAMP)
                    for topic, count in partition_counts.items() for partition in range(count)}
        self._partition_counts = partition_counts
        self.sessions.clustered = len(cluster.brokers) > 1
        for record in retained:
            self._replay_retained(record)
        for record in sessions:
            self.sessions.replay_session(record)
        self.sessions.start_expiry_timers()
        for record in wills:
            self.wills.apply(record)
        for key, position in log_ends.items():
            self._start_reader(key, position)
        self.sessions.follower = StateFollower(self, SESSIONS_TOPIC, ends[SESSIONS_TOPIC], self.sessions.follow_session)
        for follower in (StateFollower(self, RETAINED_TOPIC, ends[RETAINED_TOPIC], self._follow_retained),
                         self.sessions.follower, StateFollower(self, WILLS_TOPIC, ends[WILLS_TOPIC], self._follow_will)):
            Deferred.fromCoroutine(follower.run()).addErrback(self.log_failure, "MQTT state follower")
        self.wills.start()
        self.log.info("MQTT front end ready: {retained} retained messages, {sessions} stored sessions",
                      retained=len(self.retained), sessions=len(self.sessions.offline))
        self._sys_loop.start(SYS_INTERVAL_S).addErrback(self.log_failure, "$SYS publisher")
        self._partition_loop.start(PARTITION_REFRESH_S, now=False).addErrback(self.log_failure, "partition refresh")

    def _log_topics(self) -> list[str]:
        return self.mapping.log_topics()

    async def create_log_topics(self, names: list[str]) -> None:
        """Create the log topics among ``names`` that do not exist yet (``mqtt_log_partitions`` partitions each)."""
        cluster = await self.broker.metadata(FRONT_END_PRINCIPAL, names, False)
        partitions = self._log_partitions or len(cluster.brokers) or 1
        for name in names:
            await self._ensure_topic(name, _DECODED, partitions)

    def reads(self, log_topic: str) -> bool:
        """Whether this hub reads ``log_topic`` already."""
        return log_topic in self._partition_counts

    def start_readers(self, log_topic: str, positions: list[int]) -> None:
        """Read every partition of a log topic the mapping rules added, each from its position."""
        for partition, position in enumerate(positions):
            self._start_reader((log_topic, partition), position)
        self._partition_counts[log_topic] = len(positions)

    def _start_reader(self, key: PartitionKey, position: int) -> None:
        dispatcher = PartitionDispatcher(self, key, position)
        self.dispatchers[key] = dispatcher
        Deferred.fromCoroutine(dispatcher.run()).addErrback(self.log_failure, "MQTT log reader")

    async def refresh_partitions(self) -> None:
        """Start readers for partitions added to the log topics since (they are read from their start)."""
        await self.mapping_rules.read_new_log_topics()
        try:
            cluster = await self.broker.metadata(FRONT_END_PRINCIPAL, sorted(self._partition_counts), False)
            for topic in cluster.topics:
                known = self._partition_counts.get(topic.name, 0)
                for partition in range(known, len(topic.partitions)):
                    position = await self.offset_of((topic.name, partition), EARLIEST_TIMESTAMP)
                    if not self.stopped:
                        self._start_reader((topic.name, partition), position)
                self._partition_counts[topic.name] = max(known, len(topic.partitions))
        except errors.BrokerError as error:
            self.log.warn("MQTT partition refresh failed: {error}", error=error)  # the next round tries again

    def stop(self) -> None:
        """Stop the log readers and timers; every client is told the server is shutting down."""
        self.stopped = True
        for loop in (self._sys_loop, self._partition_loop):
            if loop.running:
                loop.stop()
        self.wills.stop()
        for connection in list(self.connections.values()):
            connection.shut_down()

    async def _ensure_topic(self, name: str, configs: dict[str, str], partitions: int = 1) -> None:
        try:
            await self.broker.create_topic(FRONT_END_PRINCIPAL, TopicSpec(name=name, partitions=partitions, configs=configs),
                                           False)
        except errors.TopicAlreadyExistsError:
            return

    async def offset_of(self, key: PartitionKey, timestamp_ms: int) -> int:
        """The earliest or latest offset of a partition."""
        found = await self.broker.list_offset(FRONT_END_PRINCIPAL, key[0], key[1], timestamp_ms)
        return int(found.offset)

    async def _replay(self, topic: str, end: int) -> Any:
        """Every record of partition 0 of an internal topic, up to ``end``."""
        position = await self.offset_of((topic, 0), EARLIEST_TIMESTAMP)
        while position < end:
            (result,) = await self.broker.fetch(FRONT_END_PRINCIPAL, read_from((topic, 0), position))
            if result.error is not None:
                raise result.error
            for record in self.records_after((topic, 0), result.records, position, result.aborted_transactions):
                yield record
            position = next_offset_after(result.records, position)

    def _replay_retained(self, record: Record) -> None:
        message = message_of(record)
        if message is not None:
            self.retained.set(replace(message, retain=True))

    def _follow_will(self, record: Record) -> None:
        """A will record another broker's hub wrote: its client is connected there now (or gone from there)."""
        if written_by(record) != self.instance:
            self.cancel_will(record.key.decode("utf-8", "replace") if record.key else "")
            self.wills.apply(record)

    def _follow_retained(self, record: Record) -> None:
        """A retained message another broker's hub set or cleared."""
        if written_by(record) != self.instance:
            self._replay_retained(record)

    # ------------------------------------------------------------------ fan-out

    def records_after(self, key: PartitionKey, data: bytes, start_offset: int,
                      aborted: Iterable[AbortedTransaction] | None = None) -> Iterator[Record]:
        """Data records of the whole batches of ``key`` in ``data`` from ``start_offset`` on; a batch that does
        not decode is counted, logged and skipped, and so are the ``aborted`` transactions' (read_committed)."""
        return readable_records(data, start_offset, topic=key[0], partition=key[1], skipped=self._skip_unreadable,
                                aborted=aborted)

    def rows_after(self, key: PartitionKey, data: bytes, start_offset: int,
                   aborted: Iterable[AbortedTransaction] | None = None) -> Iterator[RecordRow]:
        """``records_after`` as ``RecordRow``s, decoded with no Python call per record: the fan-out, catch-up and
        share-group reads, where every record goes to subscribers."""
        for _, rows in readable_batches(data, start_offset, topic=key[0], partition=key[1],
                                        skipped=self._skip_unreadable, decode=decode_record_rows, aborted=aborted):
            for row in rows:
                if row.offset >= start_offset:
                    yield row

    def _skip_unreadable(self, batch: UnreadableBatch) -> None:
        self.log.warn(SKIPPED_LOG_FORMAT, **self.unreadable.skipped("MQTT reader", batch))

    def dispatch_all(self, key: PartitionKey, data: bytes, start_offset: int,
                     aborted: Iterable[AbortedTransaction] | None = None) -> None:
        """Hand every committed record of a fetch from ``start_offset`` on to the live sessions whose subscriptions
        match its MQTT topic (``_hand_out``); one socket write per connection."""
        with self.batched_writes():
            self._hand_out(key, [(row.offset, message_of(row, key))
                                 for row in self.rows_after(key, data, start_offset, aborted)], self.dispatchers.get(key))

    def batched_writes(self) -> _BatchedWrites:
        """Cork every connection for the block: each writes once at its end (one socket write per fan-out)."""
        return _BatchedWrites(self)

    def _uncork(self) -> None:
        """The end of a corked batch: every connection with writes queued meanwhile writes them, once."""
        self.corked = False
        connections = self._to_flush
        if connections:
            self._to_flush = set()
            for connection in connections:
                connection.flush()

    def flush_later(self, connection: Connection) -> None:
        """``connection`` has writes queued while corked: flush it when the batch is done."""
        self._to_flush.add(connection)

    def appended(self, key: PartitionKey, base_offset: int, timestamp_ms: int, records: list[PublishToLog]) -> None:
        """``records`` were just appended to ``key`` at ``base_offset`` (``mqtt_puback = "written"``): hand them to
        the live sessions from memory now, before their fsync, when they continue what the partition's shared
        reader has handed out (its position moves past them, so its fetch skips them). Otherwise (another
        writer's records between, not read yet) the reader brings them once they are durable, in log order."""
        dispatcher = self.dispatchers.get(key)
        if dispatcher is None or dispatcher.position != base_offset:
            return
        dispatcher.position = base_offset + len(records)
        if not self.registry:
            return
        topic, partition = key
        if len(records) == 1:  # a paced message comes alone: each connection it reaches writes once anyway
            action = records[0]
            message = message_from_record(action.key, action.payload, action.headers, timestamp_ms,
                                          (topic, partition, base_offset))
            if message is not None:
                self._route(key, base_offset, message)
            return
        with self.batched_writes():
            self._hand_out(key, [(offset, message_from_record(action.key, action.payload, action.headers, timestamp_ms,
                                                              (topic, partition, offset)))
                                 for offset, action in enumerate(records, base_offset)])

    def _hand_out(self, key: PartitionKey, messages: list[tuple[int, OutboundMessage | None]],
                  reader: PartitionDispatcher | None = None) -> None:
        """Offer each (offset, message) of ``key``, in log order, to the live sessions it reaches: a run of messages
        without share groups as one action list per session (``offer_live_many``), a message with share groups on its
        own once what came before is out (the members' room now decides which gets it). ``reader`` (the partition's)
        moves past each record as it is handed out: a session state written meanwhile (a QoS 2 delivery's, before
        its PUBLISH goes out) stores a cursor past the records it holds, in flight or queued."""
        offers: dict[str, list[LiveOffer]] = {}  # by client id
        for offset, message in messages:
            unshared = None if message is None else self.registry.unshared_route(message.topic)
            if unshared is None and message is not None:
                self._offer_all(key, offers)
                offers = {}
            if reader is not None:
                reader.position = offset + 1
            if message is None:
                continue
            if unshared is None:
                self._route(key, offset, message)
                continue
            for client_id, subscriptions in unshared.items():
                offers.setdefault(client_id, []).append((offset, message, subscriptions))
        self._offer_all(key, offers)

    def _offer_all(self, key: PartitionKey, offers: dict[str, list[LiveOffer]]) -> None:
        for client_id, offered in offers.items():
            self.connections[client_id].offer_live_many(key, offered)

    def _route(self, key: PartitionKey, offset: int, message: OutboundMessage) -> None:
        """Offer the message at ``offset`` of ``key`` to every live session whose subscriptions match its topic."""
        connections = self.connections
        unshared = self.registry.unshared_route(message.topic)
        if unshared is not None:  # the usual case: no share group to choose a member of
            for client_id, subscriptions in unshared.items():
                connections[client_id].offer_live(key, offset, message, subscriptions)
            return
        backlog = self.share_backlog

        def accepts(client_id: str, subscription: Subscription) -> bool:
            if backlog.holds(group_key_of(subscription), key):
                return False  # the group's kept messages go first, in log order
            connection = connections[client_id]
            # a member reopened here past ``offset`` would pass over it: another member gets it
            return connection.accepts_live(key) and not connection.stood_past(key, offset)

        unplaced: list[GroupKey] = []
        for client_id, subscriptions in self.registry.route(message.topic, accepts, unplaced).items():
            connections[client_id].offer_live(key, offset, message, subscriptions)
        for group in unplaced:
            # kept unless every member stood past it on its previous broker (whose readers handed it out there)
            if not all(connections[client_id].stood_past(key, offset)
                       for client_id, _ in self.registry.group_members(message.topic, group)):
                backlog.keep(group, key, offset)

    def subscribe(self, client_id: str, subscription: Subscription) -> None:
        """Add or replace a live subscription (a share group's first member here opens it: ``ShareBacklog.opened``)."""
        opened = self.registry.add(client_id, subscription)
        if opened is not None:
            self.share_backlog.opened(opened)

    def unsubscribe(self, client_id: str, topic_filter: str) -> None:
        """Remove a live subscription (``topic_filter`` as sent)."""
        closed = self.registry.remove(client_id, topic_filter)
        if closed is not None:
            self.share_backlog.closed(closed)

    def resume_share_groups(self) -> None:
        """Hand messages kept for share groups to members with room again (a client acknowledged, or caught up)."""
        self.share_backlog.resume()

    def live_position(self, key: PartitionKey) -> int:
        """The next offset the shared reader of ``key`` will hand out."""
        return self.dispatchers[key].position

    async def restart_position(self, key: PartitionKey, offset: int) -> int:
        """Where a read of ``key`` goes on after ``offset`` fell outside the log: the log start when retention passed
        it, the log end when it is past the end (a crash took back an unsynced tail that was delivered before its
        fsync, ``mqtt_puback = "written"``: reading from the start would deliver the whole log again)."""
        end = await self.offset_of(key, LATEST_TIMESTAMP)
        return end if offset > end else await self.offset_of(key, EARLIEST_TIMESTAMP)

    def partition_for(self, log_topic: str, key: bytes) -> int:
        """The partition of a record key: a stable hash, so one MQTT topic stays in order."""
        return zlib.crc32(key) % self._partition_counts.get(log_topic, 1)

    # ------------------------------------------------------------------ sessions

    async def open_session(self, connection: Connection, clean_start: bool) -> StoredSession | None:
        """Take over a live connection with the same client id and load the stored session."""
        await self.started.wait()
        client_id = connection.client_id
        previous = self.connections.get(client_id)
        if previous is not None and previous is not connection:
            await previous.take_over()
        self.cancel_will(client_id)  # a will with a delay is not sent when the client comes back [MQTT-3.1.3-9]
        stored = await self.sessions.load(client_id, clean_start)
        self.connections[client_id] = connection
        return stored

    def session_ended(self, connection: Connection, stored: StoredSession | None) -> None:
        """A connection is over: keep its session offline until it expires, or forget it."""
        client_id = connection.client_id
        live_here = self.connections.get(client_id) is connection
        if live_here:
            del self.connections[client_id]
            for group in self.registry.remove_client(client_id):
                self.share_backlog.closed(group)
            # what it had of its share groups' messages and will not get (an ended session: its in-flight ones too)
            self.share_backlog.hand_back(connection.take_queued_shared(in_flight_too=stored is None))
            delayed = self._will_timers.get(client_id)
            # before the session's record: a broker taking it over waits for that
            self.wills.disconnected(client_id, None if delayed is None else delayed[1])
        self.sessions.ended(client_id, stored, live_here)

    # ------------------------------------------------------------------ wills and retained

    def schedule_will(self, will: ScheduleWill) -> None:
        """Publish the will at its time (now if it is due), unless the client id comes back first."""
        delay_ms = will.at_ms - self.now_ms()
        if delay_ms <= 0:
            self._publish_will(will)
            return
        self.cancel_will(will.client_id)
        timer = self.reactor.callLater(delay_ms / 1000.0, self._publish_will, will)
        self._will_timers[will.client_id] = (timer, will)

    def cancel_will(self, client_id: str) -> None:
        """The client id connected again (here or elsewhere): its delayed will is not sent."""
        pending = self._will_timers.pop(client_id, None)
        if pending is not None and pending[0].active():
            pending[0].cancel()

    def _publish_will(self, will: ScheduleWill) -> None:
        self._will_timers.pop(will.client_id, None)
        writes = [self.retain(action) if isinstance(action, Retain) else self.publish_once(action)
                  for action in will.actions]
        # The stored record goes once the will is written: a broker dying in between leaves it to a survivor. A
        # failed write is tried again, the whole will (at least once, as its QoS 1 message: a part written before
        # the failure may be written twice).
        gatherResults(writes, consumeErrors=True).addCallbacks(
            lambda _: self.wills.published(will.client_id), self._will_failed, errbackArgs=(will,))

    def _will_failed(self, failure: Failure, will: ScheduleWill) -> None:
        if self.stopped:  # its stored record stays: the next run, or a survivor, publishes it
            return
        self.log.warn("publishing the will of MQTT client {client_id} failed ({error}); trying again in {delay} s",
                      client_id=will.client_id, error=failure.value.subFailure.getErrorMessage(), delay=WILL_RETRY_S)
        timer = self.reactor.callLater(WILL_RETRY_S, self._publish_will, will)
        self._will_timers[will.client_id] = (timer, will)  # the client id back first: ``cancel_will``, not sent

    def publish_once(self, action: PublishToLog) -> Deferred[Any]:
        """Append one record that nobody waits for (a will) in the in-sync replicas."""
        batch = single_record_batch(self.now_ms(), action.key, action.payload, action.headers)
        partition = self.partition_for(action.log_topic, action.key)
        return self.broker.produce(FRONT_END_PRINCIPAL, action.log_topic, partition, batch, Acks.ALL,
                                   produce_timeout_ms_default)

    def retain(self, action: Retain) -> Deferred[Any]:
        """Set or clear a retained message, in memory at once and durably in the compacted topic (the
        Deferred fires once that write is held by the in-sync replicas)."""
        key = record_key(action.topic)
        message = message_from_record(key, action.payload, action.headers, self.now_ms())
        assert message is not None, "the session validated the topic name"
        self.retained.set(replace(message, retain=True))
        batch = single_record_batch(self.now_ms(), key, action.payload or None, (*action.headers, *self.own_header))
        return self.broker.produce(FRONT_END_PRINCIPAL, RETAINED_TOPIC, 0, batch, Acks.ALL, produce_timeout_ms_default)

    # ------------------------------------------------------------------ $SYS

    def publish_sys(self) -> None:
        """Publish broker statistics under ``$SYS/broker/`` as retained QoS 0 messages (not logged)."""
        values = {
            "version": f"mqbroker {__version__}",
            "uptime": f"{int(self.reactor.seconds() - self._started_s)} seconds",
            "clients/connected": len(self.connections),
            "subscriptions/count": len(self.registry),
            "retained messages/count": len(self.retained),
            **self.statistics,
        }
        for name, value in values.items():
            message = OutboundMessage(topic=f"$SYS/broker/{name}", payload=str(value).encode(), qos=0, retain=True,
                                      created_ms=self.now_ms())
            self.retained.set(message)
            for client_id, subscriptions in self.registry.route(message.topic, lambda *_: True).items():
                self.connections[client_id].deliver_direct(message, subscriptions)

    def log_failure(self, failure: Failure, what: str) -> None:
        """Log a failed background step (the listener goes on)."""
        self.log.failure("{what} failed", failure, what=what)
