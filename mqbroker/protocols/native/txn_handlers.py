"""The native protocol's transaction APIs: decoded requests -> ``IBroker`` transaction calls -> responses.

A failure of a whole request (fenced, not the coordinator, concurrent transactions) travels in
the response envelope; per-partition outcomes in the body. The types are in ``txn_messages``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mqbroker import errors
from mqbroker.groups import messages as groups
from mqbroker.groups.model import TopicPartition
from mqbroker.interfaces import IBroker
from mqbroker.model import Principal
from mqbroker.protocols.deferreds import settle
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.native import txn_messages as t
from mqbroker.protocols.native.group_handlers import partition_commits
from mqbroker.protocols.native.replies import error_code
from mqbroker.transactions import messages as txn


def _partitions(topics: Iterable[Any], field: str) -> frozenset[TopicPartition]:
    """Every (topic, partition) of a request's topics (``field`` names their partition list)."""
    return frozenset(TopicPartition(topic.name, number) for topic in topics for number in getattr(topic, field))


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic_partition in sorted(partitions):
        grouped.setdefault(topic_partition.topic, []).append(topic_partition.partition)
    return grouped


async def handle_add_partitions_to_txn(broker: IBroker, principal: Principal, request: t.AddPartitionsToTxnRequest) -> Any:
    """Add partitions to the ongoing transaction (or verify them: KIP-890); one outcome for all."""
    partitions = _partitions(request.topics, "partitions")
    _, error = await settle(broker.add_partitions_to_txn(principal, txn.AddPartitionsRequest(
        transactional_id=request.transactional_id, producer_id=request.producer_id,
        producer_epoch=request.producer_epoch, partitions=partitions, verify_only=request.verify_only)))
    code, message = error_code(error)
    return t.AddPartitionsToTxnResponse(results=tuple(
        t.AddPartitionsToTxnTopicResult(name=name, partitions=tuple(
            t.AddPartitionsToTxnPartitionResult(partition_index=number, error_code=code, error_message=message)
            for number in numbers))
        for name, numbers in _by_topic(partitions).items()
    ))


async def handle_add_offsets_to_txn(broker: IBroker, principal: Principal, request: t.AddOffsetsToTxnRequest) -> Any:
    """Add the group's offsets partition to the ongoing transaction."""
    await broker.add_offsets_to_txn(principal, txn.AddOffsetsRequest(
        transactional_id=request.transactional_id, producer_id=request.producer_id,
        producer_epoch=request.producer_epoch, group_id=request.group_id))
    return t.AddOffsetsToTxnResponse()


async def handle_end_txn(broker: IBroker, principal: Principal, request: t.EndTxnRequest) -> Any:
    """Commit or abort; answered once the decision is durable (with ``bump_epoch``: with the next epoch)."""
    bumped = await broker.end_txn(principal, txn.EndTxnRequest(
        transactional_id=request.transactional_id, producer_id=request.producer_id,
        producer_epoch=request.producer_epoch, committed=request.committed, bump_epoch=request.bump_epoch))
    if bumped is None:
        return t.EndTxnResponse()
    return t.EndTxnResponse(producer_id=bumped.producer_id, producer_epoch=bumped.producer_epoch)


async def handle_write_txn_markers(broker: IBroker, principal: Principal, request: t.WriteTxnMarkersRequest) -> Any:
    """Append a coordinator's markers to the partitions led here; one outcome per marker and partition."""
    markers = [
        txn.TransactionMarker(producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                              coordinator_epoch=marker.coordinator_epoch, committed=marker.transaction_result,
                              partitions=_partitions(marker.topics, "partition_indexes"))
        for marker in request.markers
    ]
    outcomes = await broker.write_txn_markers(principal, markers)
    results = []
    for marker in markers:
        mine = {o.topic_partition: o.error for o in outcomes if o.producer_id == marker.producer_id}
        topics = []
        for name, numbers in _by_topic(marker.partitions).items():
            partition_results = []
            for number in numbers:
                code, message = error_code(mine.get(TopicPartition(name, number)))
                partition_results.append(t.WritableTxnMarkerPartitionResult(
                    partition_index=number, error_code=code, error_message=message))
            topics.append(t.WritableTxnMarkerTopicResult(name=name, partitions=tuple(partition_results)))
        results.append(t.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=tuple(topics)))
    return t.WriteTxnMarkersResponse(markers=tuple(results))


async def handle_txn_offset_commit(broker: IBroker, principal: Principal, request: t.TxnOffsetCommitRequest) -> Any:
    """Commit a group's offsets in a transaction; a refused commit fails every partition."""
    commits = partition_commits(request.topics)
    offsets = groups.OffsetCommitRequest(group_id=request.group_id, member_id=request.member_id,
                                         group_instance_id=request.group_instance_id,
                                         generation_id=request.generation_id, offsets=commits)
    _, error = await settle(broker.txn_commit_offsets(principal, txn.TxnOffsetCommitRequest(
        transactional_id=request.transactional_id, producer_id=request.producer_id,
        producer_epoch=request.producer_epoch, offsets=offsets)))
    code, message = error_code(error)
    return t.TxnOffsetCommitResponse(topics=tuple(
        t.TxnOffsetCommitResponseTopic(name=topic.name, partitions=tuple(
            t.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code,
                                               error_message=message)
            for p in topic.partitions))
        for topic in request.topics
    ))


async def handle_describe_transactions(
    broker: IBroker, principal: Principal, request: t.DescribeTransactionsRequest
) -> Any:
    """Each id's state (or its error: not here, unknown, not allowed)."""
    described = await broker.describe_transactions(principal, request.transactional_ids)
    states = []
    for transactional_id, answer in zip(request.transactional_ids, described):
        if not isinstance(answer, txn.TransactionDescription):
            code, message = error_code(answer)
            states.append(t.DescribedTransaction(transactional_id=transactional_id, error_code=code,
                                                 error_message=message))
            continue
        states.append(t.DescribedTransaction(
            transactional_id=transactional_id, transaction_state=answer.state.value,
            transaction_timeout_ms=answer.timeout_ms, transaction_start_time_ms=answer.start_ms,
            producer_id=answer.producer_id, producer_epoch=answer.producer_epoch,
            coordinator_epoch=answer.coordinator_epoch,
            topics=tuple(t.TransactionTopicPartitions(topic=name, partitions=tuple(numbers))
                         for name, numbers in _by_topic(answer.partitions).items()),
        ))
    return t.DescribeTransactionsResponse(transaction_states=tuple(states))


async def handle_list_transactions(broker: IBroker, principal: Principal, request: t.ListTransactionsRequest) -> Any:
    """The ids this broker coordinates (of the given states and producer ids)."""
    try:
        states = [txn.TransactionState(name) for name in request.state_filters]
    except ValueError:
        known = ", ".join(state.value for state in txn.TransactionState)
        raise errors.InvalidRequestError(f"unknown transaction state in {list(request.state_filters)}; "
                                         f"known: {known}") from None
    listed = await broker.list_transactions(principal, states, request.producer_id_filters)
    return t.ListTransactionsResponse(transaction_states=tuple(
        t.ListedTransaction(transactional_id=item.transactional_id, producer_id=item.producer_id,
                            transaction_state=item.state.value)
        for item in listed
    ))


HANDLERS = {
    m.ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    m.ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    m.ApiKey.END_TXN: handle_end_txn,
    m.ApiKey.WRITE_TXN_MARKERS: handle_write_txn_markers,
    m.ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    m.ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    m.ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
}
