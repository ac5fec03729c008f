"""A share queue's dead letters decided by its share group's host, routed through its dead-letter exchange.

The host drops a share queue's heads beyond ``x-max-length`` (reason ``maxlen``) and the messages
past ``x-delivery-limit`` (``delivery_limit``) itself, whichever broker their consumers came
through. It cannot route: with a dead-letter exchange the queue's group copies them (acks=all,
with ``dlq.*`` origin headers) to the queue's dead-letter topic (``stored.dead_letter_topic``),
and a second share group over that topic, named after it, hands them to the AMQP front ends.
Each broker's housekeeping asks whether that group has anything ready; if so it joins as a member,
acquires what is there, republishes each message through the dead-letter exchange with ``x-death``
(the reason the host gave), accepts the records once the copies are durable (releases them when a
copy was refused), and leaves. The group's leases make it at least once across brokers and their
failures, as every share-group delivery is.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.logger import Logger

from mqbroker import errors, limits
from mqbroker.model import AcknowledgeType, TopicSpec
from mqbroker.protocols.amqp.appender import BatchStored, all_settled
from mqbroker.protocols.amqp.queue_arguments import DeathReason, QueuePolicy
from mqbroker.protocols.amqp.queue_state import QueuedMessage
from mqbroker.protocols.amqp.queues import QueueHost
from mqbroker.protocols.amqp.share_arguments import ranges_of
from mqbroker.protocols.amqp.share_view import ready_messages
from mqbroker.protocols.amqp.stored import dead_letter_topic, queued_message
from mqbroker.records.dead_letters import HEADER_REASON
from mqbroker.records.decoder import decode_records_as
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches
from mqbroker.records.record import RecordHeader
from mqbroker.shares import messages as share


def dead_letter_topic_spec(topic: str) -> TopicSpec:
    """The dead-letter topic of a share queue: one partition, as its queue topic."""
    return TopicSpec(name=topic, partitions=1)


#: The x-death reason of a dead letter whose ``dlq.reason`` header is missing or unknown.
DEFAULT_REASON = DeathReason.REJECTED


def dead_letters_in(partition: share.SharePartitionRecords) -> tuple[list[tuple[QueuedMessage, DeathReason]], list[int]]:
    """The acquired dead letters of one partition's answer with their reasons, in offset order; and the acquired
    offsets that did not decode (garbage gives those, never an exception)."""
    acquired = {offset for leased in partition.acquired for offset in range(leased.first, leased.last + 1)}
    found: list[tuple[QueuedMessage, DeathReason]] = []
    records = bytes(partition.records)
    try:
        for position, header in iter_batches(records, check=False):
            if header.is_control or not any(header.base_offset <= offset <= header.last_offset for offset in acquired):
                continue
            batch = records[position : position + header.size_bytes]
            try:
                found += [dead for dead in decode_records_as(batch, _dead_letter) if dead[0].offset in acquired]
            except CorruptRecordError:
                continue  # this batch's offsets are reported undecoded
    except CorruptRecordError:
        pass  # a header that does not read: nothing after it is found
    decoded = {message.offset for message, _ in found}
    return found, sorted(acquired - decoded)


def _dead_letter(offset: int, key: bytes | None, value: bytes | None, headers: tuple[RecordHeader, ...],
                 timestamp_ms: int) -> tuple[QueuedMessage, DeathReason]:
    reason = next((value for name, value in headers if name == HEADER_REASON), None)
    try:
        death = DeathReason(reason.decode("ascii")) if reason else DEFAULT_REASON
    except (UnicodeDecodeError, ValueError):
        death = DEFAULT_REASON
    return queued_message(offset, key, value, headers, timestamp_ms), death


class DeadLetterForwarding:
    """One broker's part in routing a share queue's host-decided dead letters through its dead-letter exchange."""

    log = Logger()

    def __init__(self, host: QueueHost, queue: str, policy: QueuePolicy,
                 republish: Callable[[str, QueuePolicy, QueuedMessage, DeathReason], list[BatchStored]]) -> None:
        self._host = host
        self._queue = queue
        self._policy = policy
        self._republish = republish
        self.topic = self.group_id = dead_letter_topic(queue)
        self.running = False

    async def ensure_group(self) -> None:
        """Create the dead-letter topic and its group unless they exist (before the queue's group names it)."""
        broker, principal = self._host.broker, self._host.principal
        try:
            await broker.create_topic(principal, dead_letter_topic_spec(self.topic), False)
        except errors.TopicAlreadyExistsError:
            pass
        try:
            await broker.create_share_group(principal, self.group_id, [self.topic], {"auto.offset.reset": "earliest"})
        except errors.DuplicateResourceError:
            pass

    async def forward(self) -> int:
        """Route what the group has ready through the dead-letter exchange (as a member for this one turn); how
        many messages."""
        broker, principal = self._host.broker, self._host.principal
        if not await ready_messages(broker, principal, self.group_id, self.topic):
            return 0
        joined = await broker.share_group_heartbeat(principal, share.ShareHeartbeatRequest(
            group_id=self.group_id, client_id=f"amqp:{self._queue}:dead-letters", topics=(self.topic,)))
        member_id = joined.member_id
        try:
            answer = await broker.share_fetch(principal, share.ShareFetchRequest(
                group_id=self.group_id, member_id=member_id, records_max=limits.share_fetch_records_max,
                wait_ms_max=limits.amqp_share_get_wait_ms_max))
            forwarded = 0
            for partition in answer.partitions:
                if partition.error is not None:
                    raise partition.error
                forwarded += await self._forward(member_id, partition)
            return forwarded
        finally:
            await broker.share_group_heartbeat(principal, share.ShareHeartbeatRequest(
                group_id=self.group_id, member_id=member_id, member_epoch=-1))

    async def _forward(self, member_id: str, partition: share.SharePartitionRecords) -> int:
        dead, undecoded = dead_letters_in(partition)
        if undecoded:
            self.log.warn("AMQP share queue {queue}: {count} dead letter(s) on {topic} do not decode; dropped",
                          queue=self._queue, count=len(undecoded), topic=self.topic)
        batches = [batch for message, reason in dead for batch in self._republish(self._queue, self._policy, message,
                                                                                      reason)]
        stored = await all_settled(batches)
        offsets = [message.offset for message, _ in dead]
        verdicts = [(offsets, AcknowledgeType.ACCEPT if stored else AcknowledgeType.RELEASE), (undecoded,
                                                                                                AcknowledgeType.ACCEPT)]
        acknowledgements = tuple(share.Acknowledgement(topic=partition.topic, partition=partition.partition,
                                                       first_offset=first, last_offset=last, kind=kind)
                                 for settled, kind in verdicts for first, last in ranges_of(settled))
        await self._host.broker.share_acknowledge(self._host.principal, share.ShareAcknowledgeRequest(
            group_id=self.group_id, member_id=member_id, acknowledgements=acknowledgements))
        return len(dead) if stored else 0

    async def delete(self) -> None:
        """The queue was deleted: its dead-letter group and topic go too (a failure is logged)."""
        broker, principal = self._host.broker, self._host.principal
        try:
            await broker.delete_share_group(principal, self.group_id)
            await broker.delete_topic(principal, self.topic)
        except errors.BrokerError as error:
            self.log.warn("AMQP share queue {queue}: deleting its dead-letter group or topic {topic} failed: {error}",
                          queue=self._queue, topic=self.topic, error=error)
