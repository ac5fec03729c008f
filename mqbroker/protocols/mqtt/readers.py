"""How the MQTT front end reads the log: record decoding helpers and one shared reader per log partition.

A ``PartitionDispatcher`` waits with ``IBroker.wait_for_records`` until its partition has records past
its position, fetches them and hands each fetch to the hub, which fans the records out to the live
sessions (one fetch for everybody, never a fetch per session). With ``mqtt_puback = "written"`` the hub
moves the position past what it hands out from memory (``MqttHub.appended``) while the reader waits, so
the fsync that makes those records visible neither wakes the reader nor has them read again. Where
the broker cannot watch the partition (another broker leads it), the reader long-polls ``fetch``.
Sessions that catch up and share groups read through the same helpers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from twisted.internet.task import deferLater
from twisted.logger import Logger

from mqbroker import errors, limits
from mqbroker.model import LATEST_TIMESTAMP, FetchPosition, FetchRequest, IsolationLevel, Principal
from mqbroker.protocols.mqtt.headers import message_from_record
from mqbroker.protocols.mqtt.state import OutboundMessage
from mqbroker.protocols.mqtt.stored import PartitionKey
from mqbroker.records.decoder import decode_rows
from mqbroker.records.header import BatchHeader
from mqbroker.records.readable import next_offset_after
from mqbroker.records.record import Record, RecordHeader

if TYPE_CHECKING:
    from mqbroker.protocols.mqtt.hub import MqttHub

#: Who the front end is when it reads and writes its own topics.
FRONT_END_PRINCIPAL = Principal("Service", "mqtt")  # "Service": no client can authenticate as it
RETRY_DELAY_S = 1.0


def read_from(key: PartitionKey, offset: int, wait_ms_max: int = 0,
              bytes_max: int = limits.mqtt_log_fetch_bytes_max) -> FetchRequest:
    """A read_committed fetch of one log partition from ``offset`` (answered at once unless ``wait_ms_max``) of at most
    ``bytes_max`` (a larger first batch comes whole): MQTT subscribers see no record of an open or aborted
    transaction."""
    position = FetchPosition(topic=key[0], partition=key[1], offset=offset, max_bytes=bytes_max)
    return FetchRequest(positions=(position,), wait_ms_max=wait_ms_max, response_bytes_max=bytes_max,
                        isolation_level=IsolationLevel.READ_COMMITTED)


class RecordRow(NamedTuple):
    """A log record as the fan-out and catch-up read it: ``Record``'s fields in a tuple the compiled decoder fills
    with no Python call per record (``decode_record_rows``)."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[RecordHeader, ...]
    timestamp_ms: int


def decode_record_rows(batch: memoryview, header: BatchHeader) -> list[RecordRow]:
    """Every record of one batch as a ``RecordRow`` (a ``readable_batches`` decoder; ``CorruptRecordError`` if any is
    bad, as ``decode_whole``)."""
    return decode_rows(batch, RecordRow, ())


def message_of(record: Record | RecordRow, key: PartitionKey | None = None) -> OutboundMessage | None:
    """The MQTT message a log record of partition ``key`` stands for (None if it cannot go to MQTT subscribers);
    it knows its position in the log when ``key`` is given (a stored session keeps that, not the message)."""
    position = None if key is None else (key[0], key[1], record.offset)
    return message_from_record(record.key, record.value, record.headers, record.timestamp_ms, position)


class PartitionDispatcher:
    """Reads one log partition from its end and fans each record out to the live sessions."""

    log = Logger()

    def __init__(self, hub: MqttHub, key: PartitionKey, position: int) -> None:
        self.hub = hub
        self.key = key
        self.position = position

    async def run(self) -> None:
        """Wait for records and hand them out until the hub stops."""
        broker, key, wait_ms = self.hub.broker, self.key, limits.mqtt_log_fetch_wait_ms_max
        while not self.hub.stopped:
            try:  # True: records are there to read now; False: time is up, or the partition is led elsewhere
                ready = await broker.wait_for_records(FRONT_END_PRINCIPAL, key[0], key[1], self.next_offset, wait_ms,
                                                      IsolationLevel.READ_COMMITTED)
            except errors.BrokerError:
                ready = False  # the fetch below meets the error too, and says what it is
            if self.hub.stopped:
                return
            if ready and not len(self.hub.registry):  # nobody to hand records to: move on without reading them
                # IBroker has only this Deferred to learn the end (the partition is led here when ``ready``, so it
                # has normally fired; routed to a new leader, it comes later). Taken only if still nobody subscribed:
                # an answer that came late may count what was published after a client's SUBACK.
                end = await self._committed_end()
                if end is not None and not len(self.hub.registry):
                    self.position = end
                    continue
            try:
                request = read_from(key, self.position, 0 if ready else wait_ms)
                (result,) = await broker.fetch(FRONT_END_PRINCIPAL, request)
            except errors.BrokerError as error:
                self.log.warn("MQTT reader of {key} failed: {error}", key=key, error=error)
                await deferLater(self.hub.reactor, RETRY_DELAY_S)
                continue
            if result.error is not None:
                await self._recover(result.error)
                continue
            end = next_offset_after(result.records, self.position)
            # Nothing to decode with nobody subscribed, nor when the fetch brings only what ``appended`` handed out from
            # memory meanwhile (``mqtt_puback = "written"``).
            if end > self.position and len(self.hub.registry):
                self.hub.dispatch_all(key, result.records, self.position, result.aborted_transactions)
            self.position = end

    async def _committed_end(self) -> int | None:
        """The partition's last stable offset; None if the broker cannot say (the fetch then meets the error)."""
        try:
            found = await self.hub.broker.list_offset(FRONT_END_PRINCIPAL, self.key[0], self.key[1], LATEST_TIMESTAMP,
                                                      IsolationLevel.READ_COMMITTED)
        except errors.BrokerError:
            return None
        return int(found.offset)

    def next_offset(self) -> int:
        """The next offset this reader hands out (``wait_for_records`` asks it at every move of the log)."""
        return self.position

    async def _recover(self, error: Exception) -> None:
        if isinstance(error, errors.OffsetOutOfRangeError):
            self.position = await self.hub.offset_of(self.key, LATEST_TIMESTAMP)
            return
        self.log.warn("MQTT reader of {key}: {error}", key=self.key, error=error)
        await deferLater(self.hub.reactor, RETRY_DELAY_S)
