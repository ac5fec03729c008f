"""Wills that outlive their broker: each hub stores the will of every client connected to it in the
compacted ``__mqtt_wills`` topic (keyed by client id, naming its broker in ``mqtt.broker``). When the
connection ends the hub publishes or drops the will itself, as on a single broker; a will with a delay
stays stored, rewritten with the wall-clock time it is due, until the hub has published it or the
client is back (then the record is deleted or replaced).

Every hub follows the topic. When the broker holding a will is fenced (dead), the hub leading
``__mqtt_wills`` partition 0 — one at a time — takes the will over: it stores it under its own name,
publishes it after its delay (at its due time if the delay had begun), then deletes the record, unless
the client connects again first (anywhere: its new broker writes the client's record). A broker
restarted before it was fenced publishes the wills its previous run held itself. On a single broker
nothing is stored: there is no survivor to publish a will.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from mqbroker import errors
from mqbroker.limits import produce_timeout_ms_default
from mqbroker.model import Acks
from mqbroker.protocols.mqtt.actions import ScheduleWill
from mqbroker.protocols.mqtt.followers import writer_broker, written_by
from mqbroker.protocols.mqtt.readers import FRONT_END_PRINCIPAL
from mqbroker.protocols.mqtt.session_directory import single_record_batch
from mqbroker.protocols.mqtt.stored_will import StoredWill
from mqbroker.records.readable import SKIPPED_LOG_FORMAT
from mqbroker.records.record import Record

if TYPE_CHECKING:
    from mqbroker.protocols.mqtt.hub import MqttHub

WILLS_TOPIC = "__mqtt_wills"
#: How often the hub leading ``__mqtt_wills`` looks for wills whose broker was fenced.
ORPHAN_CHECK_INTERVAL_S = 1.0


class ClusterWills:
    """The wills of clients connected anywhere in the cluster (see the module docstring)."""

    log = Logger()

    def __init__(self, hub: MqttHub) -> None:
        self.hub = hub
        #: Wills other brokers' hubs hold, by client id: (their broker's node id, the will).
        self.elsewhere: dict[str, tuple[int | None, StoredWill]] = {}
        self._stored_here: set[str] = set()  # client ids whose newest record this hub wrote
        self._check = LoopingCall(lambda: Deferred.fromCoroutine(self.publish_orphans()))
        self._check.clock = hub.reactor

    def start(self) -> None:
        """Look for orphaned wills every ``ORPHAN_CHECK_INTERVAL_S``."""
        self._check.start(ORPHAN_CHECK_INTERVAL_S, now=False).addErrback(self.hub.log_failure, "orphaned wills check")

    def stop(self) -> None:
        """Stop looking (at shutdown)."""
        if self._check.running:
            self._check.stop()

    def apply(self, record: Record) -> None:
        """A record of ``__mqtt_wills`` (replayed, or written by another hub)."""
        if written_by(record) == self.hub.instance:
            return
        client_id = (record.key or b"").decode("utf-8", "replace")
        self._stored_here.discard(client_id)  # the client's newest will is another broker's now
        if record.value is None:
            self.elsewhere.pop(client_id, None)
            return
        try:
            will = StoredWill.from_bytes(record.value)
        except errors.CorruptMessageError as error:
            self.elsewhere.pop(client_id, None)
            fields = self.hub.unreadable.skipped_at("MQTT replay", WILLS_TOPIC, 0, record.offset, record.offset,
                                                    error, what=f"the will of {client_id!r}")
            self.log.warn(SKIPPED_LOG_FORMAT + " (the will is not published if its broker dies)", **fields)
            return
        self.elsewhere[client_id] = (writer_broker(record), will)

    def connected(self, client_id: str, will: ScheduleWill | None) -> None:
        """A client's session opened here: store its will (or delete the one another broker, or this one, held)."""
        if not self.hub.sessions.clustered:
            return
        if will is not None:
            value: bytes | None = StoredWill.of(will, self.hub.now_ms()).to_bytes()
            self._stored_here.add(client_id)
        elif client_id in self.elsewhere or client_id in self._stored_here:
            value = None
            self._stored_here.discard(client_id)
        else:
            return
        self.elsewhere.pop(client_id, None)
        self._write(client_id, value)

    def disconnected(self, client_id: str, delayed: ScheduleWill | None) -> None:
        """A client's connection here ended: this hub publishes or drops its will itself. A ``delayed`` will (its
        delay began now) stays stored with its due time, so a survivor publishes it if this broker dies first."""
        if client_id not in self._stored_here:
            return
        if delayed is not None:
            self._write(client_id, StoredWill.begun(delayed, self.hub.now_ms()).to_bytes())
        else:
            self._stored_here.discard(client_id)
            self._write(client_id, None)

    def published(self, client_id: str) -> None:
        """This hub published a will it had stored: delete the record."""
        if client_id in self._stored_here:
            self._stored_here.discard(client_id)
            self._write(client_id, None)

    async def publish_orphans(self) -> None:
        """Publish the wills whose broker is fenced (on the hub leading ``__mqtt_wills``) or was this broker's
        previous run, after their delay."""
        if not self.elsewhere:
            return
        try:
            cluster = await self.hub.broker.metadata(FRONT_END_PRINCIPAL, [WILLS_TOPIC], False)
        except errors.BrokerError as error:
            self.log.warn("MQTT wills: the cluster metadata is not available now ({error}); checking again soon",
                          error=error)
            return
        [topic] = cluster.topics
        live = {broker.node_id for broker in cluster.brokers}
        leading = topic.error is None and bool(topic.partitions) and topic.partitions[0].leader_id == self.hub.node_id
        now_ms = self.hub.now_ms()
        for client_id, (holder, will) in list(self.elsewhere.items()):
            # A will of this broker's previous run (this hub's own records are never in ``elsewhere``).
            previous_run = holder is not None and holder == self.hub.node_id
            if not (previous_run or (leading and holder is not None and holder not in live)):
                continue
            if client_id in self.hub.connections:
                continue
            del self.elsewhere[client_id]
            scheduled = will.schedule(client_id, now_ms)
            self.log.info("MQTT will of {client_id}: its broker {holder} died holding it; publishing it in {delay_ms} ms",
                          client_id=client_id, holder=holder, delay_ms=max(0, scheduled.at_ms - now_ms))
            self._stored_here.add(client_id)  # held here now: if this broker dies too, the next survivor has it
            self._write(client_id, StoredWill.begun(scheduled, now_ms).to_bytes())
            self.hub.schedule_will(scheduled)

    def _write(self, client_id: str, value: bytes | None) -> None:
        batch = single_record_batch(self.hub.now_ms(), client_id.encode(), value, self.hub.own_header)
        produced = self.hub.broker.produce(FRONT_END_PRINCIPAL, WILLS_TOPIC, 0, batch, Acks.ALL,
                                           produce_timeout_ms_default)
        produced.addErrback(self.hub.log_failure, "storing an MQTT will")
