"""Produce, Fetch, ListOffsets and InitProducerId: the record paths.

Produce and Fetch are on every message's path: plain Deferreds, no coroutine, nothing per record.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed

from mqbroker.model import (
    EARLIEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchResult,
    OffsetAndTimestamp,
)
from mqbroker.protocols.deferreds import gathered, settle, settled
from mqbroker.protocols.kafka.error_codes import UNKNOWN_TOPIC_ID, kafka_error
from mqbroker.protocols.kafka.handlers.context import RequestContext, by_topic
from mqbroker.protocols.kafka.messages import produce_fetch as m
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches

#: Kafka's FETCH_SESSION_ID_NOT_FOUND: mqbroker creates no fetch sessions (every fetch is a full one).
FETCH_SESSION_ID_NOT_FOUND = 70
#: Fetch isolation level read_committed.
READ_COMMITTED = 1
#: Bytes read to find the first record at or after a time (the batch the broker's time index names).
TIME_LOOKUP_BYTES_MAX = 1024 * 1024
#: ListOffsets 8: the start of the broker's local log (KIP-405); without tiered storage, the earliest offset.
EARLIEST_LOCAL_TIMESTAMP = -4


def handle_produce(context: RequestContext, request: m.ProduceRequest) -> Deferred[Any]:
    """Append each partition's batches (all before anything waits, which keeps their order)."""
    if context.version < m.TOPIC_ID_VERSION:
        return _produce(context, request, None)
    named = context.calls.topic_names(topic.topic_id for topic in request.topic_data)
    return named.addCallback(lambda names: _produce(context, request, names))


def _produce(context: RequestContext, request: m.ProduceRequest, names: dict[bytes, str] | None) -> Deferred[Any]:
    """The Produce with its topics named (``names``: by id, for versions that name topics by id)."""
    calls = context.calls
    add_to_transaction = context.version >= m.PRODUCE_ADDS_TO_TRANSACTION_VERSION
    answers = []
    for topic in request.topic_data:
        name = topic.name if names is None else names.get(topic.topic_id)
        key = topic.name if names is None else topic.topic_id
        for partition in topic.partition_data:
            if name is None:
                answers.append(succeed((key, m.PartitionProduceResponse(
                    index=partition.index, error_code=UNKNOWN_TOPIC_ID, base_offset=-1,
                    error_message=f"no topic has the id {topic.topic_id.hex()}: refresh the metadata"))))
                continue
            produced = calls.produce(name, partition.index, partition.records or b"", request.acks, request.timeout_ms,
                                     request.transactional_id, add_to_transaction)
            answers.append(settled(produced).addCallback(_produce_result, key, partition.index))
    return gathered(answers).addCallback(_produce_response, names is not None)


def _produce_result(outcome: tuple[Any, BaseException | None], topic: str | bytes, partition: int
                    ) -> tuple[str | bytes, Any]:
    result, error = outcome
    code, message = kafka_error(error)
    return topic, m.PartitionProduceResponse(
        index=partition, error_code=code, error_message=message,
        base_offset=result.base_offset if result else -1,
        log_append_time_ms=result.log_append_time_ms if result else -1,
        log_start_offset=result.log_start_offset if result else -1,
    )


def _produce_response(answers: list[tuple[Any, m.PartitionProduceResponse]], by_id: bool) -> m.ProduceResponse:
    return m.ProduceResponse(responses=tuple(
        m.TopicProduceResponse(topic_id=key, partition_responses=tuple(results)) if by_id else
        m.TopicProduceResponse(name=key, partition_responses=tuple(results))
        for key, results in by_topic(answers).items()
    ))


def handle_fetch(context: RequestContext, request: m.FetchRequest) -> Deferred[Any]:
    """Long-poll read of whole batches; every fetch is a full one (session id 0, as KIP-227 allows)."""
    if request.session_id != 0:
        return succeed(m.FetchResponse(throttle_time_ms=0, error_code=FETCH_SESSION_ID_NOT_FOUND, responses=()))
    if context.version < m.TOPIC_ID_VERSION:
        return _fetch(context, request, None)
    named = context.calls.topic_names(topic.topic_id for topic in request.topics)
    return named.addCallback(lambda names: _fetch(context, request, names))


def _fetch(context: RequestContext, request: m.FetchRequest, names: dict[bytes, str] | None) -> Deferred[Any]:
    """The Fetch with its topics named (``names``: by id, for versions that name topics by id); partitions of
    unknown ids answer UNKNOWN_TOPIC_ID without a read."""
    positions = []
    unknown: list[tuple[bytes, m.PartitionData]] = []
    for topic in request.topics:
        name = topic.topic if names is None else names.get(topic.topic_id)
        for partition in topic.partitions:
            if name is None:
                unknown.append((topic.topic_id, m.PartitionData(
                    partition_index=partition.partition, error_code=UNKNOWN_TOPIC_ID, high_watermark=-1,
                    aborted_transactions=None, records=None)))
            else:
                positions.append((name, partition.partition, partition.fetch_offset, partition.partition_max_bytes,
                                  partition.current_leader_epoch))
    fetched = context.calls.fetch(positions, request.max_wait_ms, request.min_bytes, request.max_bytes,
                                  request.isolation_level) if positions else succeed([])
    return fetched.addCallback(_fetch_response, names, unknown)


def _fetch_response(fetched: list[FetchResult], names: dict[bytes, str] | None,
                    unknown: list[tuple[bytes, m.PartitionData]]) -> m.FetchResponse:
    answers = [(result.topic, _fetch_result(result)) for result in fetched]
    if names is None:
        return m.FetchResponse(throttle_time_ms=0, responses=tuple(
            m.FetchableTopicResponse(topic=name, partitions=tuple(results)) for name, results in by_topic(answers).items()
        ))
    ids = {name: topic_id for topic_id, name in names.items()}
    return m.FetchResponse(throttle_time_ms=0, responses=tuple(
        m.FetchableTopicResponse(topic_id=topic_id, partitions=tuple(results))
        for topic_id, results in by_topic([(ids[name], result) for name, result in answers] + unknown).items()
    ))


def _fetch_result(result: FetchResult) -> m.PartitionData:
    code, _ = kafka_error(result.error)
    # read_uncommitted results carry no stable offset (-1) and no aborted list (None): the high watermark answers.
    return m.PartitionData(
        partition_index=result.partition, error_code=code, high_watermark=result.high_watermark,
        last_stable_offset=result.last_stable_offset if result.last_stable_offset >= 0 else result.high_watermark,
        log_start_offset=result.log_start_offset, records=result.records,
        aborted_transactions=None if result.aborted_transactions is None else tuple(
            m.AbortedTransaction(producer_id=aborted.producer_id, first_offset=aborted.first_offset)
            for aborted in result.aborted_transactions),
    )


async def handle_list_offsets(context: RequestContext, request: m.ListOffsetsRequest) -> m.ListOffsetsResponse:
    """Earliest (-2, -4), latest (-1), largest-timestamp (-3) or first-at-or-after-a-time offsets, all partitions
    looked up at once."""
    lookups = [
        settled(Deferred.fromCoroutine(_list_offset(
            context, topic.name, partition.partition_index,
            EARLIEST_TIMESTAMP if partition.timestamp == EARLIEST_LOCAL_TIMESTAMP else partition.timestamp,
            request.isolation_level)))
        .addCallback(_offset_result, topic.name, partition.partition_index)
        for topic in request.topics
        for partition in topic.partitions
    ]
    answers = await gathered(lookups)
    return m.ListOffsetsResponse(topics=tuple(
        m.ListOffsetsTopicResponse(name=name, partitions=tuple(results)) for name, results in by_topic(answers).items()
    ))


async def _list_offset(
    context: RequestContext, topic: str, partition: int, timestamp_ms: int, isolation_level: int
) -> OffsetAndTimestamp:
    """The broker's lookup; by time, narrowed from the batch it names to the first record at or after the time.

    The broker's time index answers per batch (no record is decoded on its paths); Kafka answers
    per record, with that record's timestamp. Decoding the one batch here, on an admin path,
    gives clients Kafka's answer.
    """
    found = await context.calls.list_offset(topic, partition, timestamp_ms, isolation_level)
    if timestamp_ms == MAX_TIMESTAMP:
        timestamp_ms = found.timestamp_ms  # the batch holding the largest timestamp: narrowed to its first record
    if timestamp_ms < 0 or found.offset < 0:
        return found
    [read] = await context.calls.fetch([(topic, partition, found.offset, TIME_LOOKUP_BYTES_MAX, -1)], 0, 0,
                                       TIME_LOOKUP_BYTES_MAX)
    if read.error is not None:
        return found  # e.g. not allowed to read the records: the batch's first offset still answers
    try:
        for position, header in iter_batches(read.records):
            if header.is_control or header.max_timestamp < timestamp_ms:
                continue
            for record in decode_records(read.records[position:position + header.size_bytes]):
                if record.offset >= found.offset and record.timestamp_ms >= timestamp_ms:
                    return OffsetAndTimestamp(offset=record.offset, timestamp_ms=record.timestamp_ms)
    except CorruptRecordError:
        pass
    return found


def _offset_result(outcome: tuple[Any, BaseException | None], topic: str, partition: int) -> tuple[str, Any]:
    found, error = outcome
    code, _ = kafka_error(error)
    return topic, m.ListOffsetsPartitionResponse(
        partition_index=partition, error_code=code,
        offset=found.offset if found else -1, timestamp=found.timestamp_ms if found else -1,
    )


async def handle_init_producer_id(context: RequestContext, request: m.InitProducerIdRequest) -> m.InitProducerIdResponse:
    """A fresh idempotent producer identity, or a transactional id's with a new epoch (at its coordinator)."""
    identity, error = await settle(context.calls.init_producer_id(request.transactional_id,
                                                                  request.transaction_timeout_ms))
    code, _ = kafka_error(error)
    return m.InitProducerIdResponse(
        throttle_time_ms=0, error_code=code,
        producer_id=identity.producer_id if identity else -1, producer_epoch=identity.producer_epoch if identity else -1,
    )
