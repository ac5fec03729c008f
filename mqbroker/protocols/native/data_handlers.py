"""The native protocol's data APIs: Metadata, Produce, Fetch and ListOffsets, each translated into ``IBroker`` calls.

Produce and fetch are the hot path: plain Deferreds, no coroutine, whole record batches passed
through untouched.
"""

from __future__ import annotations

import contextvars
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure

from mqbroker import errors
from mqbroker.interfaces import IBroker
from mqbroker.model import Acks, FetchPosition, FetchRequest, FetchResult, IsolationLevel, Principal
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.deferreds import gathered, settle, settled
from mqbroker.protocols.native.replies import error_code, per_topic

#: The request's API version, for handlers whose answer differs by version (Fetch).
REQUEST_API_VERSION: contextvars.ContextVar[int] = contextvars.ContextVar("api_version", default=0)


async def handle_metadata(broker: IBroker, principal: Principal, request: m.MetadataRequest) -> Any:
    """Brokers and topic partitions with their leaders."""
    cluster = await broker.metadata(principal, request.topics, request.allow_auto_topic_creation)
    topics = []
    for topic in cluster.topics:
        code, message = error_code(topic.error)
        partitions = tuple(
            m.MetadataPartition(
                partition_index=p.partition, leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                replica_nodes=p.replicas, isr_nodes=p.isr,
            )
            for p in topic.partitions
        )
        topics.append(m.MetadataTopic(
            name=topic.name, error_code=code, error_message=message, is_internal=topic.internal, partitions=partitions
        ))
    brokers = tuple(m.MetadataBroker(node_id=b.node_id, host=b.host, port=b.port) for b in cluster.brokers)
    return m.MetadataResponse(
        brokers=brokers, cluster_id=cluster.cluster_id, controller_id=cluster.controller_id, topics=tuple(topics)
    )


def handle_produce(broker: IBroker, principal: Principal, request: m.ProduceRequest) -> Deferred[Any]:
    """Append each partition's batches (all before anything waits, which keeps their order);
    answer once each partition is acknowledged. Plain Deferreds, no coroutine: this is the hot path.
    Acks other than 0, 1 and -1 fail every partition with INVALID_REQUIRED_ACKS."""
    try:
        acks = Acks.from_wire(request.acks)
    except errors.InvalidRequiredAcksError as error:
        refusals = [succeed((None, error)).addCallback(_produce_result, topic.name, partition.partition_index)
                    for topic in request.topics for partition in topic.partitions]
        return gathered(refusals).addCallback(_produce_response)
    if len(request.topics) == 1 and len(request.topics[0].partitions) == 1:  # nearly every request: one callback
        topic, partition = request.topics[0], request.topics[0].partitions[0]
        produced = broker.produce(principal, topic.name, partition.partition_index, partition.records, acks,
                                  request.timeout_ms, request.transactional_id,
                                  add_to_transaction=request.add_to_transaction)
        return produced.addCallbacks(_one_produced, _one_refused, callbackArgs=(topic.name, partition.partition_index),
                                     errbackArgs=(topic.name, partition.partition_index))
    answers = [
        settled(broker.produce(principal, topic.name, partition.partition_index, partition.records,
                               acks, request.timeout_ms, request.transactional_id,
                               add_to_transaction=request.add_to_transaction)).addCallback(
            _produce_result, topic.name, partition.partition_index)
        for topic in request.topics
        for partition in topic.partitions
    ]
    return gathered(answers).addCallback(_produce_response)


def _produce_result(settled: tuple[Any, BaseException | None], topic: str, partition: int) -> tuple[str, Any]:
    result, error = settled
    code, message = error_code(error)
    return topic, m.ProducePartitionResult(
        partition_index=partition, error_code=code, error_message=message,
        base_offset=result.base_offset if result else -1,
        log_append_time_ms=-1,
        log_start_offset=result.log_start_offset if result else -1,
    )


def _one_produced(result: Any, topic: str, partition: int) -> m.ProduceResponse:
    return _produce_response([_produce_result((result, None), topic, partition)])


def _one_refused(failure: Failure, topic: str, partition: int) -> m.ProduceResponse:
    failure.trap(errors.BrokerError)  # as ``settled``: other failures pass
    return _produce_response([_produce_result((None, failure.value), topic, partition)])


def _produce_response(answers: list[tuple[str, m.ProducePartitionResult]]) -> m.ProduceResponse:
    return m.ProduceResponse(topics=per_topic(m.ProduceTopicResult, answers))


def handle_fetch(broker: IBroker, principal: Principal, request: m.FetchRequest) -> Deferred[Any]:
    """Long-poll read of whole batches (plain Deferreds, like produce); read_committed needs version 1."""
    committed = request.isolation_level == IsolationLevel.READ_COMMITTED
    if committed and REQUEST_API_VERSION.get() < 1:
        raise errors.UnsupportedVersionError(
            "read_committed needs Fetch version 1, whose answer lists the aborted transactions")
    fetch = FetchRequest(
        positions=tuple(
            FetchPosition(topic=topic.name, partition=p.partition_index, offset=p.fetch_offset,
                          max_bytes=p.partition_max_bytes, current_leader_epoch=p.current_leader_epoch,
                          last_fetched_epoch=p.last_fetched_epoch)
            for topic in request.topics
            for p in topic.partitions
        ),
        wait_ms_max=request.max_wait_ms, response_bytes_min=request.min_bytes, response_bytes_max=request.max_bytes,
        isolation_level=IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED,
    )
    if request.replica_id >= 0:  # a follower broker replicating (reads past the high watermark, reports divergence)
        fetched = broker.replica_fetch(principal, request.replica_id, fetch)
    else:
        fetched = broker.fetch(principal, fetch)
    return fetched.addCallback(_fetch_response)


def _fetch_response(fetched: list[FetchResult]) -> m.FetchResponse:
    answers = ((result.topic, _fetch_result(result)) for result in fetched)
    return m.FetchResponse(topics=per_topic(m.FetchTopicResult, answers))


def _fetch_result(result: FetchResult) -> m.FetchPartitionResult:
    code, message = error_code(result.error)
    return m.FetchPartitionResult(
        partition_index=result.partition, error_code=code, error_message=message,
        high_watermark=result.high_watermark,
        last_stable_offset=result.last_stable_offset if result.last_stable_offset >= 0 else result.high_watermark,
        log_start_offset=result.log_start_offset, records=result.records,
        diverging_epoch=result.diverging_epoch, diverging_end_offset=result.diverging_end_offset,
        aborted_transactions=None if result.aborted_transactions is None else tuple(
            m.FetchAbortedTransaction(producer_id=aborted.producer_id, first_offset=aborted.first_offset)
            for aborted in result.aborted_transactions),
    )


async def handle_list_offsets(broker: IBroker, principal: Principal, request: m.ListOffsetsRequest) -> Any:
    """Earliest, latest or by-timestamp offsets."""
    topics = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            found, error = await settle(
                broker.list_offset(principal, topic.name, partition.partition_index, partition.timestamp,
                                   request.isolation_level)
            )
            code, message = error_code(error)
            partitions.append(m.ListOffsetsPartitionResult(
                partition_index=partition.partition_index, error_code=code, error_message=message,
                offset=found.offset if found else -1, timestamp=found.timestamp_ms if found else -1,
            ))
        topics.append(m.ListOffsetsTopicResult(name=topic.name, partitions=tuple(partitions)))
    return m.ListOffsetsResponse(topics=tuple(topics))
