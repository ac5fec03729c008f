"""A reopened session's in-flight messages, read back from the log before they are resent.

A stored session keeps, for each QoS 1/2 message in flight, where the message is in the log
(``state.py``), not the message. When the session is opened again, on this broker after a
restart or on another one, the adapter reads those records (one fetch per partition and
megabyte, from the lowest offset wanted) and hands each to ``SessionState.read_back``; the
session then resends them with their packet ids and DUP=1 [MQTT-4.4.0-1]. A record the log no
longer has (retention deleted it) drops its delivery, as a Kafka consumer whose committed offset
fell off the log moves on. A record the partition does not serve yet (its new leader's high
watermark lags) fails the open instead: the CONNECT is refused as *Server unavailable* and the
client's next one reads again.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from twisted.logger import Logger

from mqbroker import errors
from mqbroker.model import EARLIEST_TIMESTAMP
from mqbroker.protocols.mqtt.readers import FRONT_END_PRINCIPAL, message_of, read_from
from mqbroker.protocols.mqtt.state import OutboundMessage, SessionState
from mqbroker.protocols.mqtt.stored import PartitionKey
from mqbroker.records.readable import next_offset_after

if TYPE_CHECKING:
    from mqbroker.protocols.mqtt.hub import MqttHub

log = Logger()


async def read_back_inflight(hub: MqttHub, state: SessionState, now_ms: int) -> None:
    """Read every ``state.unread`` message from the log into ``state`` (``BrokerError`` if a partition cannot be
    read now: the session then stays stored as it was)."""
    wanted: dict[PartitionKey, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for packet_id, (topic, partition, offset) in state.unread.items():
        wanted[(topic, partition)][offset].append(packet_id)
    found: dict[int, OutboundMessage] = {}
    for key, packet_ids_at in wanted.items():
        for offset, message in (await _read_offsets(hub, key, set(packet_ids_at))).items():
            for packet_id in packet_ids_at[offset]:
                found[packet_id] = message
    missing = len(state.unread) - len(found)
    if missing:
        log.warn("MQTT session {client_id}: {missing} in-flight messages are no longer in the log; not resent",
                 client_id=state.client_id, missing=missing)
    for packet_id in list(state.unread):
        state.read_back(packet_id, found.get(packet_id), now_ms)


async def _read_offsets(hub: MqttHub, key: PartitionKey, offsets: set[int]) -> dict[int, OutboundMessage]:
    """The messages at ``offsets`` of one partition that the log still has.

    Only what lies below the log's start (retention), or in a deleted topic, is gone for good. An offset at or past
    what the partition
    serves now (a new leader whose high watermark has not caught up yet) raises ``LeaderNotAvailableError``: it
    was delivered, so it was there, and dropping it would lose it; the client's next CONNECT tries again.
    """
    found: dict[int, OutboundMessage] = {}
    position, last = min(offsets), max(offsets)
    while position <= last and len(found) < len(offsets):
        (result,) = await hub.broker.fetch(FRONT_END_PRINCIPAL, read_from(key, position))
        if isinstance(result.error, errors.OffsetOutOfRangeError):
            start = await hub.offset_of(key, EARLIEST_TIMESTAMP)
            if start > position:  # retention deleted what is below the log's start
                position = start
                continue
            raise _not_readable_yet(key, position)
        if isinstance(result.error, errors.UnknownTopicOrPartitionError):
            break  # the log topic was deleted: its messages are gone
        if result.error is not None:
            raise result.error
        for record in hub.records_after(key, result.records, position, result.aborted_transactions):
            if record.offset in offsets:
                message = message_of(record, key)
                if message is not None:
                    found[record.offset] = message
        reached = next_offset_after(result.records, position)
        if reached == position:  # nothing more is served from here
            raise _not_readable_yet(key, position)
        position = reached
    return found


def _not_readable_yet(key: PartitionKey, offset: int) -> errors.LeaderNotAvailableError:
    return errors.LeaderNotAvailableError(
        f"{key[0]}-{key[1]} does not serve offset {offset} yet, where a message in flight is; connect again")
