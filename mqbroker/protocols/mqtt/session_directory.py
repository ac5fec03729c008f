"""Where each persistent MQTT session is, cluster-wide: stored offline here, live on this broker, or
live on another broker's hub; and the session records that say so in ``__mqtt_sessions``.

The hub replays the records at start and follows what other brokers' hubs write (``followers.py``).
A connect to a session live elsewhere claims it: the holder closes its connection and writes the
session's final state (the handover), waited for at most ``limits.mqtt_session_handoff_ms_max`` or
until the holder's broker is fenced. An offline session is forgotten when its expiry interval ends.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import deferLater
from twisted.logger import Logger

from mqbroker import errors, limits
from mqbroker.limits import produce_timeout_ms_default
from mqbroker.model import Acks
from mqbroker.protocols.mqtt.followers import StateFollower, writer_broker, written_by
from mqbroker.protocols.mqtt.readers import FRONT_END_PRINCIPAL
from mqbroker.protocols.mqtt.state import SessionState
from mqbroker.protocols.mqtt.stored import StoredSession
from mqbroker.records.builder import plain_batch
from mqbroker.records.readable import SKIPPED_LOG_FORMAT
from mqbroker.records.record import Record

if TYPE_CHECKING:
    from mqbroker.protocols.mqtt.hub import MqttHub

SESSIONS_TOPIC = "__mqtt_sessions"
#: While a connect waits for a session's handover: how often the metadata is read to see whether the
#: broker holding the session was fenced meanwhile (then it is dead and the wait ends).
HOLDER_CHECK_INTERVAL_S = 0.1


def single_record_batch(timestamp_ms: int, key: bytes, value: bytes | None, headers: Any) -> bytes:
    """One record as a RecordBatch v2."""
    return plain_batch(timestamp_ms, ((key, value, headers),))


def _ended(value: bytes) -> bool:
    """Whether a stored session record says its client had gone (an unreadable one: not)."""
    try:
        return StoredSession.from_bytes(value).ended_at_ms is not None
    except errors.CorruptMessageError:
        return False


class SessionDirectory:
    """The persistent sessions of one MQTT listener's hub and their records (see the module docstring)."""

    log = Logger()

    def __init__(self, hub: MqttHub) -> None:
        self.hub = hub
        self.offline: dict[str, StoredSession] = {}
        #: Whether other brokers run hubs too (sessions then move between them).
        self.clustered = False
        self.follower: StateFollower | None = None
        self._durable_sessions: set[str] = set()
        self._expiry_timers: dict[str, IDelayedCall] = {}
        #: Sessions whose newest record says they are live on another broker, and that broker's node id.
        self._live_elsewhere: dict[str, int | None] = {}
        #: Clients whose local connection was taken over by another broker's clean start (nothing to store).
        self._moved: set[str] = set()
        #: Connects waiting for another broker to hand over the session it held (its final state).
        self._handoffs: dict[str, Deferred[StoredSession | None]] = {}
        #: When each live connection's session was opened (older records of other brokers cannot take it over).
        self._opened_at_ms: dict[str, int] = {}

    def start_expiry_timers(self) -> None:
        """After the replay: every offline session expires at its time."""
        for client_id, stored in self.offline.items():
            self._start_expiry(client_id, stored)

    def replay_session(self, record: Record) -> None:
        """Apply one record of the sessions topic: the session is live somewhere, offline, or gone."""
        client_id = (record.key or b"").decode("utf-8", "replace")
        if record.value is None:
            self.offline.pop(client_id, None)
            self._durable_sessions.discard(client_id)
        else:
            try:
                stored = StoredSession.from_bytes(record.value)
                SessionState.from_bytes(stored.state)  # checked here: the expiry timer and the next connect read it
            except errors.CorruptMessageError as error:
                self.offline.pop(client_id, None)  # an older record of this client is stale now
                self._durable_sessions.add(client_id)  # the record is still there: forgetting writes a tombstone
                fields = self.hub.unreadable.skipped_at("MQTT replay", SESSIONS_TOPIC, 0, record.offset, record.offset,
                                                        error, what=f"the session of {client_id!r}")
                self.log.warn(SKIPPED_LOG_FORMAT + " (the client starts a new session)", **fields)
                return
            self.offline[client_id] = stored
            self._durable_sessions.add(client_id)
            if stored.ended_at_ms is None:
                self._live_elsewhere[client_id] = writer_broker(record)  # it may still hold it (or died holding it)
            else:
                self._live_elsewhere.pop(client_id, None)

    def follow_session(self, record: Record) -> None:
        """A session record another broker's hub wrote: the session is live there, offline, or gone."""
        if written_by(record) == self.hub.instance:
            return
        client_id = (record.key or b"").decode("utf-8", "replace")
        local = self.hub.connections.get(client_id)
        ended = record.value is not None and _ended(record.value)
        if record.value is None or not (local or ended):  # gone, or live there: nothing to expire here
            self.cancel_expiry(client_id)
            self.replay_session(record)
        if local is not None and not ended and record.timestamp_ms >= self._opened_at_ms.get(client_id, 0):
            if record.value is None:
                self._moved.add(client_id)  # a clean start elsewhere: this session is over, nothing to store
            local.take_over().addErrback(self.hub.log_failure, "a session takeover from another broker")
        elif ended and (client_id in self._handoffs or local is None):
            self.cancel_expiry(client_id)
            self.replay_session(record)
            handoff = self._handoffs.pop(client_id, None)
            if handoff is not None:
                handoff.callback(self.offline.get(client_id))
            elif client_id in self.offline:
                self._start_expiry(client_id, self.offline[client_id])

    async def load(self, client_id: str, clean_start: bool) -> StoredSession | None:
        """The stored session of a client connecting here (claimed from another broker first if it is live
        there); a clean start forgets it."""
        self.cancel_expiry(client_id)
        if self.clustered and self.follower is not None:
            await self.follower.caught_up()  # the newest record of the session, whoever wrote it
            if client_id in self._live_elsewhere and not clean_start:
                await self._claim(client_id)
        stored = self.offline.pop(client_id, None)
        if clean_start and client_id in self._durable_sessions:
            self.forget_session(client_id)
            stored = None
        self._opened_at_ms[client_id] = self.hub.now_ms()
        return stored

    async def _claim(self, client_id: str) -> None:
        """Take a session that is live on another broker: that broker closes its connection and writes the
        session's final state, waited for at most ``limits.mqtt_session_handoff_ms_max``, or until that broker
        is seen fenced (it is dead: then the newest record known is the session)."""
        known = self.offline.get(client_id)
        handoff: Deferred[StoredSession | None] = Deferred()
        self._handoffs[client_id] = handoff
        handoff.addTimeout(limits.mqtt_session_handoff_ms_max / 1000.0, self.hub.reactor)
        holder = self._live_elsewhere.get(client_id)
        if holder is not None:
            Deferred.fromCoroutine(self._end_wait_when_fenced(holder, handoff)).addErrback(
                self.hub.log_failure, "watching a session holder's broker")
        try:
            if known is not None:
                await self.store_session(client_id, replace(known, ended_at_ms=None))
            handed = await handoff
            if handed is not None:
                self.offline[client_id] = handed
        except DeferredTimeout:
            self.log.info("MQTT session {client_id}: no broker handed it over; resuming its newest stored state",
                          client_id=client_id)
        finally:
            self._handoffs.pop(client_id, None)
            self._live_elsewhere.pop(client_id, None)

    async def _end_wait_when_fenced(self, holder: int, handoff: Deferred[StoredSession | None]) -> None:
        """End a handover wait (with no handover) once broker ``holder`` is fenced: a dead broker sends none
        (nor does this broker's own previous run: its records are never this hub's own)."""
        if holder == self.hub.node_id:
            handoff.callback(None)
            return
        while not handoff.called:
            try:
                cluster = await self.hub.broker.metadata(FRONT_END_PRINCIPAL, [], False)
            except errors.BrokerError:
                cluster = None  # no answer now: look again, the handover bound still holds
            if handoff.called:
                return
            if cluster is not None and holder not in {broker.node_id for broker in cluster.brokers}:
                self.log.info("MQTT session holder broker {holder} is fenced; not waiting for its handover",
                              holder=holder)
                handoff.callback(None)
                return
            await deferLater(self.hub.reactor, HOLDER_CHECK_INTERVAL_S)

    def store_session(self, client_id: str, stored: StoredSession) -> Deferred[Any]:
        """Write a session record; fires once it is durable."""
        self._durable_sessions.add(client_id)
        batch = single_record_batch(self.hub.now_ms(), client_id.encode(), stored.to_bytes(), self.hub.own_header)
        return self.hub.broker.produce(FRONT_END_PRINCIPAL, SESSIONS_TOPIC, 0, batch, Acks.ALL,
                                       produce_timeout_ms_default)

    def forget_session(self, client_id: str) -> None:
        """Delete a stored session (a tombstone in the compacted topic)."""
        if client_id not in self._durable_sessions:
            return
        self._durable_sessions.discard(client_id)
        batch = single_record_batch(self.hub.now_ms(), client_id.encode(), None, self.hub.own_header)
        self.hub.broker.produce(FRONT_END_PRINCIPAL, SESSIONS_TOPIC, 0, batch, Acks.ALL,
                                produce_timeout_ms_default).addErrback(self.hub.log_failure, "deleting an MQTT session")

    def ended(self, client_id: str, stored: StoredSession | None, was_live_here: bool) -> None:
        """A connection is over: keep its session offline until it expires, or forget it."""
        if was_live_here:
            self._opened_at_ms.pop(client_id, None)
        if client_id in self._moved:
            self._moved.discard(client_id)
            return
        if stored is None:
            self.forget_session(client_id)
            return
        self.offline[client_id] = stored
        self.store_session(client_id, stored).addErrback(self.hub.log_failure, "storing an MQTT session")
        self._start_expiry(client_id, stored)

    def _start_expiry(self, client_id: str, stored: StoredSession) -> None:
        expiry_ms = SessionState.from_bytes(stored.state).expiry_interval_s * 1000
        now_ms = self.hub.now_ms()
        ended_at_ms = stored.ended_at_ms if stored.ended_at_ms is not None else now_ms
        delay_s = max(0, ended_at_ms + expiry_ms - now_ms) / 1000.0
        self._expiry_timers[client_id] = self.hub.reactor.callLater(delay_s, self._expire, client_id)

    def cancel_expiry(self, client_id: str) -> None:
        """The client is back (or its session is gone): no expiry timer."""
        expiry = self._expiry_timers.pop(client_id, None)
        if expiry is not None and expiry.active():
            expiry.cancel()

    def _expire(self, client_id: str) -> None:
        self._expiry_timers.pop(client_id, None)
        if self.offline.pop(client_id, None) is not None:
            self.forget_session(client_id)

    def discard_offline_session(self, client_id: str) -> bool:
        """Delete a stored session whose client is not connected now (an operator's call); False if none."""
        timer = self._expiry_timers.get(client_id)
        if timer is not None and timer.active():
            timer.cancel()
        found = client_id in self.offline
        self._expire(client_id)
        return found
