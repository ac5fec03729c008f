"""How the MQTT hubs of a cluster share their sessions and retained messages: each hub tails the
compacted ``__mqtt_sessions`` and ``__mqtt_retained`` topics and applies what the other brokers' hubs
wrote (its own records carry its ``mqtt.hub`` header and are skipped: it applied them already).

A session record names where the session is: live on the writing hub (``ended_at_ms`` None),
offline (``ended_at_ms`` set), or gone (a tombstone). A hub whose client connects while the session
is live on another hub claims it (a live record of its own); the other hub then closes its
connection (session taken over) and writes the session's final state, which the new hub waits for
at most ``limits.mqtt_session_handoff_ms_max`` before it answers CONNACK — or only until the
metadata shows that broker fenced (dead: no handover will come; the record names it in ``mqtt.broker``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import deferLater
from twisted.logger import Logger

from mqbroker import errors, limits
from mqbroker.model import LATEST_TIMESTAMP
from mqbroker.protocols.mqtt.readers import FRONT_END_PRINCIPAL, RETRY_DELAY_S, read_from
from mqbroker.records.readable import next_offset_after
from mqbroker.records.record import Record

if TYPE_CHECKING:
    from mqbroker.protocols.mqtt.hub import MqttHub

#: The header naming the hub that wrote a session or retained record.
HUB_HEADER = "mqtt.hub"
#: The header naming the broker (node id, decimal) whose hub wrote a session record.
BROKER_HEADER = "mqtt.broker"


def written_by(record: Record) -> bytes | None:
    """The ``mqtt.hub`` header of a record (None for records from before hubs named themselves)."""
    return next((value for name, value in record.headers if name == HUB_HEADER), None)


def writer_broker(record: Record) -> int | None:
    """The node id in a record's ``mqtt.broker`` header (None without one, or when it does not read)."""
    value = next((value for name, value in record.headers if name == BROKER_HEADER), None)
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


class StateFollower:
    """Tails partition 0 of a compacted state topic from ``position`` and hands each record to ``apply``."""

    log = Logger()

    def __init__(self, hub: MqttHub, topic: str, position: int, apply: Callable[[Record], None]) -> None:
        self.hub = hub
        self.key = (topic, 0)
        self.position = position
        self._apply = apply
        self._waiters: list[tuple[int, Deferred[None]]] = []

    async def run(self) -> None:
        """Long-poll until the hub stops."""
        while not self.hub.stopped:
            try:
                (result,) = await self.hub.broker.fetch(
                    FRONT_END_PRINCIPAL, read_from(self.key, self.position, limits.mqtt_log_fetch_wait_ms_max))
            except errors.BrokerError as error:
                self.log.warn("MQTT follower of {key} failed: {error}", key=self.key, error=error)
                await deferLater(self.hub.reactor, RETRY_DELAY_S)
                continue
            if result.error is not None:
                if isinstance(result.error, errors.OffsetOutOfRangeError):
                    self.position = await self.hub.offset_of(self.key, LATEST_TIMESTAMP)
                else:
                    self.log.warn("MQTT follower of {key}: {error}", key=self.key, error=result.error)
                    await deferLater(self.hub.reactor, RETRY_DELAY_S)
                continue
            for record in self.hub.records_after(self.key, result.records, self.position):
                self._apply(record)
            self.position = next_offset_after(result.records, self.position)
            self._wake()

    async def caught_up(self) -> None:
        """Return once every record written before the call has been applied."""
        end = await self.hub.offset_of(self.key, LATEST_TIMESTAMP)
        await self._reached(end)

    def _reached(self, offset: int) -> Deferred[None]:
        if self.position >= offset:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._waiters.append((offset, waiter))
        return waiter

    def _wake(self) -> None:
        ready = [waiter for offset, waiter in self._waiters if offset <= self.position]
        self._waiters = [(offset, waiter) for offset, waiter in self._waiters if offset > self.position]
        for waiter in ready:
            waiter.callback(None)
