"""The MQTT front end's Twisted adapter: one ``MqttConnection`` per socket around a sans-I/O ``MqttSession``.

The session decides; this module only carries out its actions, in order (``action_queue.py``), against the
broker (``IBroker``) and the listener's shared ``MqttHub``:

* a session's state is written to ``__mqtt_sessions`` (acks=-1) one write at a time, each of the newest state: a
  blocking ``StoreSession`` at the head of an action list before the rest runs (later lists wait, their stores
  coalesce); a non-blocking one within ``limits.mqtt_session_store_interval_ms`` (``session_writes.py``);
* a reopened session's in-flight messages are read back from the log (``read_back.py``) before the
  session resends them;
* ``PublishToLog`` actions of one list are appended as one batch per log partition (the
  partition is a stable hash of the MQTT topic); QoS 1/2 are acknowledged once durable
  (``mqtt_puback = "durable"``), or once appended, and then handed to live subscribers at once (``"written"``);
* deliveries come from the hub's shared log readers while the session keeps up ("live");
  a session whose window is full, or that reconnects with a stored position, reads the log
  itself from its cursor ("catching up", ``catch_up.py``) until it reaches the shared readers again.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from twisted.internet.defer import Deferred, gatherResults, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorCore
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import errors, limits
from mqbroker.config import ConfigError
from mqbroker.interfaces import IBroker
from mqbroker.limits import produce_timeout_ms_default
from mqbroker.model import ANONYMOUS, Acks, Operation, Principal, ProduceResult
from mqbroker.protocols.adapter import ConnectionHandle, SessionFactory
from mqbroker.protocols.frontends import FrontEndContext, FrontEndSecurity
from mqbroker.protocols.mqtt import security as mqtt_security
from mqbroker.protocols.mqtt.admin_view import MqttAdminView
from mqbroker.protocols.mqtt.acl import MqttIdentity, TopicDecisions
from mqbroker.protocols.mqtt.action_queue import ActionQueue
from mqbroker.protocols.mqtt.actions import (
    Action,
    AddSubscription,
    Close,
    OpenSession,
    PublishToLog,
    RemoveSubscription,
    Retain,
    ScheduleWill,
    Send,
    SendPubAcks,
    SendPublishes,
    SessionEnded,
    SetTimer,
    StoreSession,
)
from mqbroker.protocols.mqtt.catch_up import CatchUp
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.hub import PUBACK_ACKS, MqttHub, reason_code_for
from mqbroker.protocols.mqtt.hub_connection import LiveOffer
from mqbroker.protocols.mqtt.packets import PROTOCOL_LEVEL_5, Publish, ReasonCode
from mqbroker.protocols.mqtt.read_back import read_back_inflight
from mqbroker.protocols.mqtt.session import ConnectionState, MqttSession
from mqbroker.protocols.mqtt.session_writes import SessionWrites
from mqbroker.protocols.mqtt.state import OutboundMessage, SessionState, Subscription
from mqbroker.protocols.mqtt.stored import PartitionKey, StoredSession
from mqbroker.protocols.mqtt.errors import MqttProtocolError
from mqbroker.protocols.mqtt.topics import TopicMapping, parse_mapping_rules, parse_subscription_filter
from mqbroker.protocols.throttle import throttles
from mqbroker.records.builder import plain_batch

_CONNECTED = ConnectionState.CONNECTED
_RECORD_FIELDS = operator.attrgetter("key", "payload", "headers")
_TICKET = operator.attrgetter("ticket")


class MqttConnection:
    """One MQTT client connection: executes its session's actions (an adapter ``Session``)."""

    log = Logger()

    def __init__(self, hub: MqttHub, config: SessionConfig, generate_client_id: Callable[[], str],
                 security: FrontEndSecurity | None = None, topic_acls: mqtt_security.ListenerAcls | None = None) -> None:
        """``security`` None: every client is let in under its username; ``topic_acls``: the listener's MQTT topic
        ACLs (shared by its connections)."""
        self.hub = hub
        self.security = security
        self.topic_acls = topic_acls or mqtt_security.ListenerAcls(security)
        #: This connection's topic decisions once it is authenticated (None: MQTT topic ACLs do not apply).
        self.topic_decisions: TopicDecisions | None = None
        self.session = MqttSession(config=config, mapping=hub.mapping, generate_client_id=generate_client_id)
        self.client_id = ""
        self.principal: Principal = ANONYMOUS
        self._connection: ConnectionHandle | None = None
        self._writes = SessionWrites(hub.reactor, hub.now_ms, self._write_session, self._session_written,
                                     lambda: self.session.state is _CONNECTED)
        self._actions = ActionQueue(self._writes, self._execute, self.flush)
        #: Carry out an action list in order (the queue's own ``run``, bound once: no call of this class's per list).
        self._run: Callable[[list[Action]], None] = self._actions.run
        self._keep_alive_timer: IDelayedCall | None = None
        self._connect_timer: IDelayedCall | None = None
        self._catch_up = CatchUp(hub, self)
        self._ended_waiters: list[Deferred[None]] | None = []
        self._outgoing: list[bytes] = []  # packets of this turn, written to the socket as one
        self._reading_paused = False  # whether ``_apply_backpressure`` paused reading the connection
        # Byte-rate quotas: publishing over quota pauses reading; deliveries over quota wait in the log.
        self._produce_throttle, self._fetch_throttle = throttles(
            security, hub.reactor, self._apply_backpressure, self._deliveries_released)

    # ------------------------------------------------------------------ adapter Session

    def connection_made(self, connection: ConnectionHandle) -> None:
        """Start the CONNECT timeout."""
        self._connection = connection
        self._connect_timer = self.hub.reactor.callLater(limits.mqtt_connect_s_max, self._connect_timed_out)

    @property
    def peer(self) -> str:
        """``host:port`` of the client ("" before the connection is made)."""
        return self._connection.peer if self._connection is not None else ""

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete packet (the adapter closes a connection that trickles one)."""
        return self.session.buffered_bytes

    def data_received(self, data: bytes) -> None:
        """Bytes from the client."""
        self.hub.statistics["bytes/received"] += len(data)
        self._run(self.session.receive_data(data, self.hub.now_ms()))
        self._apply_backpressure()
        if self._catch_up.behind:  # (every read: no call when the session reads no partition itself)
            self._catch_up.resume()
        self.hub.share_backlog.resume()

    def connection_lost(self, reason: Failure) -> None:
        """The socket closed: the session ends (will, stored state)."""
        for timer in (self._connect_timer, self._keep_alive_timer):
            if timer is not None and timer.active():
                timer.cancel()
        for throttle in (self._produce_throttle, self._fetch_throttle):
            if throttle is not None:
                throttle.cancel()
        was_open = self.session.session is not None
        self._run(self.session.connection_lost(self.hub.now_ms()))
        if not was_open and self.session.state is not ConnectionState.OPENING:
            self._end()

    # ------------------------------------------------------------------ what the hub calls

    def accepts_live(self, partition_key: PartitionKey) -> bool:
        """Whether a shared reader may hand this session a message of ``partition_key`` now."""
        return (
            self.session.state is _CONNECTED and not self._catch_up.is_behind(partition_key)
            and self.session.accepting_deliveries and not self.deliveries_held
        )

    def offer_live(
        self, partition_key: PartitionKey, offset: int, message: OutboundMessage, subscriptions: list[Subscription]
    ) -> None:
        """A shared reader's record; a session with a full window falls back to reading the log itself."""
        if self._takes_live(partition_key, offset, message):
            self.deliver(message, subscriptions)

    def offer_live_many(self, partition_key: PartitionKey, offers: list[LiveOffer]) -> None:
        """``offer_live`` of each (offset, message, subscriptions) of one append, in log order, as one action list."""
        if self.session.state is _CONNECTED:
            self.deliver_many((message, subscriptions) for offset, message, subscriptions in offers
                              if self._takes_live(partition_key, offset, message))

    def _takes_live(self, partition_key: PartitionKey, offset: int, message: OutboundMessage) -> bool:
        """Whether the session takes the shared reader's message at ``offset`` now; with a full window (or over
        its fetch quota) it falls back to reading the log itself from there."""
        session = self.session
        if session.state is not _CONNECTED or self._catch_up.passes_over(partition_key, offset):
            return False
        fetch = self._fetch_throttle
        if (fetch is not None and fetch.active) or (message.qos and not session.accepting_deliveries):
            self._catch_up.fall_behind(partition_key, offset)
            return False
        return True

    def stood_past(self, partition_key: PartitionKey, offset: int) -> bool:
        """Whether this session, reopened here, stood past the record at ``offset`` on its previous broker
        (``CatchUp.stood_past``): its share groups give that record to another member."""
        return self._catch_up.stood_past(partition_key, offset)

    def has_room(self) -> bool:
        """Whether a message kept for one of this session's share groups may be handed to it now."""
        return self.session.state is _CONNECTED and self.session.accepting_deliveries and not self.deliveries_held

    def take_queued_shared(self, in_flight_too: bool) -> list[tuple[OutboundMessage, Subscription]]:
        """``SessionState.take_shared`` of the ended session: its share groups hand the messages to other members."""
        state = self.session.session
        return [] if state is None else state.take_shared(in_flight_too)

    def deliver_direct(self, message: OutboundMessage, subscriptions: list[Subscription]) -> None:
        """A QoS 0 message that is not in the log ($SYS)."""
        if self.session.state is _CONNECTED and mqtt_security.topic_allowed(self, Operation.READ, message.topic):
            self._run(self.session.deliver(message, subscriptions, self.hub.now_ms()))

    def take_over(self) -> Deferred[None]:
        """Close for a new connection with the same client id; fires once the session has ended."""
        ended = self._when_ended()
        self._run(self.session.close(ReasonCode.SESSION_TAKEN_OVER, self.hub.now_ms()))
        return ended

    def shut_down(self) -> None:
        """The broker is stopping: DISCONNECT 0x8B (level 5) and close; the session ends as on any server close."""
        self._run(self.session.close(ReasonCode.SERVER_SHUTTING_DOWN, self.hub.now_ms()))

    # ------------------------------------------------------------------ running actions in order

    def _write_session(self) -> Deferred[Any]:
        """Write the session's state as of now, with its cursors as of now (``SessionWrites``: one at a time)."""
        state = self.session.session
        assert state is not None
        return self.hub.sessions.store_session(self.client_id, self._catch_up.stored(state.to_bytes()))

    def _session_written(self, held: list[list[Action]] | None, failure: Failure | None) -> None:
        if failure is not None:
            self.log.failure("storing the session of {client_id} failed; closing", failure, client_id=self.client_id)
            self._run(self.session.close(ReasonCode.UNSPECIFIED_ERROR, self.hub.now_ms()))
            return
        self._actions.run_held(held)

    def _execute(self, actions: list[Action]) -> None:
        publishes: dict[PartitionKey, list[PublishToLog]] = {}
        refused: list[int] = []
        retained_writes: list[Deferred[Any]] = []
        check_writes: bool | None = None  # once per list with a message: no topic ACL, no check per message
        # A run of messages to one MQTT topic (the usual case) goes to one partition: looked up once per run.
        last_key: bytes | None = None
        last_log_topic: str | None = None
        group: list[PublishToLog] = []
        for action in actions:
            kind = type(action)
            if kind is PublishToLog:
                if check_writes is None:
                    check_writes = mqtt_security.topic_acls_apply(self)
                if check_writes and not mqtt_security.topic_allowed(
                        self, Operation.WRITE, action.key.decode("utf-8", "replace")):
                    if action.ticket is not None:  # QoS 1/2: PUBACK/PUBREC 0x87 (level 5); QoS 0 is dropped
                        refused.append(action.ticket)
                    continue
                if action.key != last_key or action.log_topic != last_log_topic:
                    last_key, last_log_topic = action.key, action.log_topic
                    group = publishes.setdefault((last_log_topic, self.hub.partition_for(last_log_topic, last_key)), [])
                group.append(action)
            elif kind is Send:
                self._send(action)
            elif kind is SendPublishes:
                self._send_publishes(action.count, action.data)
            elif kind is SendPubAcks:
                self._write(action.data)
            elif isinstance(action, Close):
                if self._connection is not None:
                    self.flush(even_when_corked=True)
                    self._connection.close()
            elif isinstance(action, OpenSession):
                self._open(action)
            elif isinstance(action, Retain):
                if mqtt_security.may_publish(self, self.hub.mapping, action.topic):
                    retained_writes.append(self.hub.retain(action))
            elif isinstance(action, AddSubscription):
                self.hub.subscribe(action.client_id, action.subscription)
                if action.send_retained:
                    self._send_retained(action.subscription)
            elif isinstance(action, RemoveSubscription):
                self.hub.unsubscribe(action.client_id, action.topic_filter)
            elif isinstance(action, SetTimer):
                self._set_timer(action.at_ms)
            elif isinstance(action, ScheduleWill):
                self.hub.schedule_will(action)
            elif isinstance(action, SessionEnded):
                self._session_ended(action)
            else:
                assert isinstance(action, StoreSession), action
                if not action.blocking:  # a blocking one was written before this list ran
                    self._writes.store_later()
        for key, group in publishes.items():
            self._append(key, group, retained_writes)
            retained_writes = []
        for write in retained_writes:  # not acknowledged with a log write (refused there): logged if it fails
            write.addErrback(self.log_failure, "storing a retained message")
        if refused:  # 3.1.1 has no negative acknowledgement: acknowledged and dropped, as Mosquitto does
            code = ReasonCode.NOT_AUTHORIZED if self.session.protocol_level == PROTOCOL_LEVEL_5 else ReasonCode.SUCCESS
            self._run(self.session.log_writes_completed(refused, self.hub.now_ms(), code))

    def _write(self, data: bytes) -> None:
        """Queue ``data`` for this turn's socket write."""
        if self._connection is not None:
            self._outgoing.append(data)
            self.hub.statistics["bytes/sent"] += len(data)

    def _send(self, action: Send) -> None:
        if isinstance(action.packet, Publish):
            self._send_publishes(1, action.data)
        else:
            self._write(action.data)

    def _send_publishes(self, count: int, data: bytes) -> None:
        """Write ``count`` PUBLISHes encoded in ``data``: counted, and charged to the client's fetch quota."""
        if self._connection is None:
            return
        self._write(data)
        self.hub.statistics["messages/sent"] += count
        if self._fetch_throttle is not None:
            self._fetch_throttle.record(len(data))
            if self._fetch_throttle.active:
                self._apply_backpressure()

    def flush(self, *, even_when_corked: bool = False) -> None:
        """Write the packets queued since the last flush in one socket write (the hub corks a fan-out batch)."""
        if not self._outgoing or self._connection is None:
            return
        if self.hub.corked and not even_when_corked:
            self.hub.flush_later(self)
            return
        data = b"".join(self._outgoing) if len(self._outgoing) > 1 else self._outgoing[0]
        self._outgoing.clear()
        self._connection.write(data)

    # ------------------------------------------------------------------ publishing into the log

    def _append(self, key: PartitionKey, group: list[PublishToLog], retained_writes: list[Deferred[Any]]) -> None:
        """One batch per log partition; QoS 1/2 tickets complete once it is durable (acks=-1; or, with
        ``mqtt_puback = "written"``, appended: acks=0), and so are the retained messages set along with it
        (with ``durable``, a PUBACKed retained message survives any one broker)."""
        timestamp_ms = self.hub.now_ms()
        batch = plain_batch(timestamp_ms, list(map(_RECORD_FIELDS, group)))  # C-level passes, no frame each
        tickets = list(filter(None, map(_TICKET, group)))  # tickets count from 1; QoS 0 has None
        self.hub.statistics["messages/received"] += len(group)
        acks = self.hub.puback_acks if tickets else Acks.NONE
        produced = self.hub.broker.produce(self.principal, key[0], key[1], batch, acks, produce_timeout_ms_default,
                                           front_end_batches=True)
        if self._produce_throttle is not None:
            self._produce_throttle.record(len(batch))
            self._apply_backpressure()
        # acks=0 (``written``): the offsets are known as soon as the batch is in the log. Its live subscribers get it
        # from memory then, before its tickets complete: in their callback when nothing else is written with it.
        appended = (key, timestamp_ms, group) if self.hub.delivers_on_append else None
        if appended is not None and (retained_writes or not tickets):
            produced.addCallback(self._appended, *appended)
            appended = None
        if retained_writes:
            produced = gatherResults([produced, *retained_writes], consumeErrors=True)
            produced.addErrback(lambda failure: failure.value.subFailure)  # the first write's own error
        if tickets:
            produced.addCallbacks(self._written, self._write_failed, callbackArgs=(tickets, appended),
                                  errbackArgs=(tickets,))
        else:
            produced.addErrback(self.log_failure, "a QoS 0 log write")

    def _appended(self, result: ProduceResult, key: PartitionKey, timestamp_ms: int,
                  group: list[PublishToLog]) -> ProduceResult:
        """``mqtt_puback = "written"``: the batch is in the log; live subscribers get it from memory now."""
        self.hub.appended(key, result.base_offset, timestamp_ms, group)
        return result

    def _written(self, result: Any, tickets: list[int],
                 appended: tuple[PartitionKey, int, list[PublishToLog]] | None) -> None:
        """The batch's tickets complete; ``appended``: ``_appended``'s arguments, when it is handed out here first
        (one callback per produce, not two)."""
        if appended is not None:
            self.hub.appended(appended[0], result.base_offset, appended[1], appended[2])
        self._run(self.session.log_writes_completed(tickets, self.hub.now_ms()))
        self._apply_backpressure()

    def _apply_backpressure(self) -> None:
        """Stop reading while a receive maximum of client messages is on its way to the log, or while
        the client is over its produce or fetch quota."""
        connection = self._connection
        if connection is None:
            return
        fetch, produce = self._fetch_throttle, self._produce_throttle
        if ((fetch is not None and fetch.active) or (produce is not None and produce.active)
                or self.session.log_writes_in_flight >= self.session.config.receive_maximum):
            if not self._reading_paused:
                self._reading_paused = True
                connection.pause_reading()
        elif self._reading_paused:  # each read and log write asks: only a change has anything to do
            self._reading_paused = False
            connection.resume_reading()

    def _write_failed(self, failure: Failure, tickets: list[int]) -> None:
        self.log.warn("log write for {client_id} failed: {error}", client_id=self.client_id, error=failure.value)
        code = reason_code_for(failure)
        self._run(self.session.log_writes_completed(tickets, self.hub.now_ms(), code))
        self._apply_backpressure()

    # ------------------------------------------------------------------ opening and ending

    def _open(self, action: OpenSession) -> None:
        self.client_id = action.client_id
        if self.security is None:
            self.principal = Principal("User", action.username) if action.username else ANONYMOUS
        else:
            authenticated = mqtt_security.authenticate(self.security, self._connection, action)
            if isinstance(authenticated, ReasonCode):
                self._run(self.session.connect_refused(authenticated, self.hub.now_ms()))
                return
            self.principal = authenticated
            self.topic_decisions = TopicDecisions(MqttIdentity(principal=authenticated, client_id=action.client_id))
            self.session.authorize_filter = mqtt_security.filter_authorizer(self, self.hub.mapping)
            will_topic = self.session.will_topic
            if will_topic is not None and not mqtt_security.may_publish(self, self.hub.mapping, will_topic):
                # as Mosquitto 2: a will the client may not publish refuses the CONNECT
                self._run(self.session.connect_refused(ReasonCode.NOT_AUTHORIZED, self.hub.now_ms()))
                return
        for throttle in (self._produce_throttle, self._fetch_throttle):
            if throttle is not None:
                throttle.principal, throttle.client_id = str(self.principal), self.client_id
        opening = Deferred.fromCoroutine(self.hub.open_session(self, action.clean_start))
        opening.addCallbacks(self._opened, self._open_failed)

    def _opened(self, stored: StoredSession | None) -> None:
        if self._connect_timer is not None and self._connect_timer.active():
            self._connect_timer.cancel()
        state = SessionState.from_bytes(stored.state) if stored is not None else None
        if stored is None or state is None or not state.unread:
            self._resume(stored, state)
            return
        reading = Deferred.fromCoroutine(read_back_inflight(self.hub, state, self.hub.now_ms()))
        reading.addCallbacks(lambda _: self._resume(stored, state), self._read_back_failed, errbackArgs=(stored,))
        reading.addErrback(self.log_failure, "opening a session")

    def _read_back_failed(self, failure: Failure, stored: StoredSession) -> None:
        """The log could not be read now: the session stays stored as it was, and the client is refused (it retries)."""
        self.log.warn("reading the in-flight messages of {client_id} back failed: {error}", client_id=self.client_id,
                      error=failure.value)
        now_ms = self.hub.now_ms()
        self.hub.session_ended(self, replace(stored, ended_at_ms=stored.ended_at_ms or now_ms))
        self._run(self.session.connect_refused(ReasonCode.SERVER_UNAVAILABLE, now_ms))
        self._end()

    def _resume(self, stored: StoredSession | None, state: SessionState | None) -> None:
        """Open the session with its stored state (its in-flight messages read back) or a new one."""
        if stored is not None and state is not None:
            self._catch_up.start_from(stored, [entry.position for entry in state.inflight.values()
                                                       if entry.position is not None])
        actions = self.session.session_opened(state, self.hub.now_ms())
        if self.session.state is _CONNECTED:
            assert self.session.session is not None
            if self.session.session is not state:
                self._catch_up.start_live()
            for subscription in self.session.session.subscriptions.values():
                self.hub.subscribe(self.client_id, subscription)
            self.hub.wills.connected(self.client_id, self.session.pending_will(self.hub.now_ms()))
        elif not any(isinstance(action, SessionEnded) for action in actions):
            self.hub.session_ended(self, None)  # the client left while its session was loading
            self._end()
        self._run(actions)
        self._catch_up.resume()

    def _open_failed(self, failure: Failure) -> None:
        if failure.check(errors.BrokerError):
            self.log.warn("refusing {client_id}: {error}", client_id=self.client_id, error=failure.value)
        else:
            self.log.failure("opening the MQTT session of {client_id} failed", failure, client_id=self.client_id)
        self._run(self.session.connect_refused(ReasonCode.SERVER_UNAVAILABLE, self.hub.now_ms()))

    def _session_ended(self, action: SessionEnded) -> None:
        stored = None
        if action.state is not None:
            stored = self._catch_up.stored(action.state.to_bytes(), self.hub.now_ms())
        self._writes.after_write(lambda: self._hand_over(stored))  # never before the write in flight

    def _hand_over(self, stored: StoredSession | None) -> None:
        """The session is over here: stored offline (or forgotten) by the hub; whoever waits for its end goes on."""
        self.hub.session_ended(self, stored)
        self._end()

    def _when_ended(self) -> Deferred[None]:
        if self._ended_waiters is None:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._ended_waiters.append(waiter)
        return waiter

    def _end(self) -> None:
        if self._keep_alive_timer is not None and self._keep_alive_timer.active():
            self._keep_alive_timer.cancel()
        waiters, self._ended_waiters = self._ended_waiters, None
        for waiter in waiters or ():
            waiter.callback(None)

    # ------------------------------------------------------------------ timers

    def _set_timer(self, at_ms: int) -> None:
        if self._keep_alive_timer is not None and self._keep_alive_timer.active():
            self._keep_alive_timer.cancel()
        delay_s = max(0, at_ms - self.hub.now_ms()) / 1000.0
        self._keep_alive_timer = self.hub.reactor.callLater(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._run(self.session.on_timer(self.hub.now_ms()))

    def _connect_timed_out(self) -> None:
        if self.session.state is ConnectionState.AWAITING_CONNECT and self._connection is not None:
            self.log.info("no CONNECT from {peer} within {timeout} s", peer=self._connection.peer, timeout=limits.mqtt_connect_s_max)
            self._connection.close()

    # ------------------------------------------------------------------ delivering to the client

    def deliver(self, message: OutboundMessage, subscriptions: list[Subscription]) -> None:
        """Hand the session a log record's message (live, or read while catching up)."""
        if self.topic_decisions is not None and not mqtt_security.topic_allowed(self, Operation.READ, message.topic):
            return  # a subscription to '#' brings only what the principal may read (no decisions: no topic ACLs)
        self._run(self.session.deliver(message, subscriptions, self.hub.now_ms()))

    def deliver_many(self, deliveries: Iterable[tuple[OutboundMessage, list[Subscription]]]) -> None:
        """``deliver`` of each (message, subscriptions) read while catching up (or of one append, ``offer_live_many``),
        as one action list (one pass through the session and the action queue per fetch, not per message). The iterable is read one delivery at a time,
        after the one before it was queued or sent. Under a fetch quota each goes on its own, so that the quota
        holds the next one back as soon as it is exceeded."""
        if self._fetch_throttle is not None:
            for message, subscriptions in deliveries:
                self.deliver(message, subscriptions)
            return
        if mqtt_security.topic_acls_apply(self):  # a subscription to '#' brings only what the principal may read
            deliveries = ((message, subscriptions) for message, subscriptions in deliveries
                          if mqtt_security.topic_allowed(self, Operation.READ, message.topic))
        self._run(self.session.deliver_many(deliveries, self.hub.now_ms()))

    def _send_retained(self, subscription: Subscription) -> None:
        topic_filter = parse_subscription_filter(subscription.topic_filter).topic_filter
        for message in list(self.hub.retained.matching(topic_filter)):
            if self.session.state is not _CONNECTED:
                return
            if message.qos and not self.session.accepting_deliveries:
                continue  # the queue is full; a retained message is a snapshot, the next one replaces it
            if not mqtt_security.topic_allowed(self, Operation.READ, message.topic):
                continue
            self._run(self.session.deliver(message, [subscription], self.hub.now_ms(), from_retained_store=True))

    @property
    def deliveries_held(self) -> bool:
        """Over its fetch quota, a session takes no deliveries: they wait in the log (it reads them later). Its
        connection is not read meanwhile either, so the acknowledgements that would release the messages
        already queued in the session wait too."""
        return self._fetch_throttle is not None and self._fetch_throttle.active

    @property
    def under_fetch_quota(self) -> bool:
        """Whether a fetch byte-rate quota applies: then each delivery may end ``deliveries_held`` (``deliver_many``
        hands each over on its own)."""
        return self._fetch_throttle is not None

    def _deliveries_released(self) -> None:
        self._apply_backpressure()
        self._catch_up.resume()
        self.hub.resume_share_groups()

    def log_failure(self, failure: Failure, what: str) -> None:
        """Log a failed background step of this connection."""
        self.log.failure("{what} for {client_id} failed", failure, what=what, client_id=self.client_id)


def build_factory(broker: IBroker, context: FrontEndContext) -> SessionFactory:
    """The MQTT listener's factory (named by the front-end plugin)."""
    reactor = context.reactor
    try:
        mapping = TopicMapping(parse_mapping_rules(context.config.mqtt_mapping_rules))
    except (ValueError, MqttProtocolError) as error:
        raise ConfigError(f"configuration key 'mqtt_mapping_rules': {error}") from None
    hub = MqttHub(broker, reactor, mapping, log_partitions=context.config.mqtt_log_partitions,
                  node_id=context.config.node_id, unreadable=context.metrics.unreadable if context.metrics is not None else None,
                  records=context.cluster_records, puback_acks=PUBACK_ACKS[context.config.mqtt_puback])
    hub.mapping_rules.start()
    config = SessionConfig(receive_maximum=limits.mqtt_log_writes_in_flight_max,
                           outbound_inflight_max_3_1_1=limits.mqtt_log_writes_in_flight_max)
    counter = itertools.count(1)
    prefix = f"mqbroker-{context.config.node_id}-{int(reactor.seconds() * 1000):x}"

    def generate_client_id() -> str:
        return f"{prefix}-{next(counter)}"

    lifecycle = IReactorCore(reactor)
    lifecycle.callWhenRunning(lambda: Deferred.fromCoroutine(hub.start()))
    lifecycle.addSystemEventTrigger("before", "shutdown", hub.stop)
    gauge = context.metrics.connections.labels("mqtt") if context.metrics is not None else None
    topic_acls = mqtt_security.ListenerAcls(context.security)
    return SessionFactory(
        lambda address: MqttConnection(hub, config, generate_client_id, context.security, topic_acls),
        idle_timeout_s=None, metrics_gauge=gauge, no_delay=True, frame_timeout_s=context.frame_timeout_s,
        started=hub.started, admin_view=MqttAdminView(hub),
    )
