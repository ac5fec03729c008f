"""AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit: a transactional producer's calls;
DescribeTransactions (the admin view) and WriteTxnMarkers (a coordinator's call on a partition leader).

The first three go to the transactional id's coordinator, TxnOffsetCommit to the group's; the
broker core checks permissions and fencing. A call's one outcome is reported on every partition
it named (a transaction takes them together or not at all).
"""

from __future__ import annotations

from mqbroker.groups.model import TopicPartition
from mqbroker.protocols.deferreds import settle
from mqbroker.protocols.kafka.error_codes import kafka_error
from mqbroker.protocols.kafka.handlers.context import RequestContext, by_topic
from mqbroker.protocols.kafka.messages import transactions as m
from mqbroker.transactions.messages import ProducerIdAndEpoch, TransactionDescription, TransactionMarker


async def handle_add_partitions_to_txn(
    context: RequestContext, request: m.AddPartitionsToTxnRequest
) -> m.AddPartitionsToTxnResponse:
    """List the partitions in the producer's ongoing transaction."""
    partitions = [(topic.name, number) for topic in request.topics for number in topic.partitions]
    _, error = await settle(context.calls.add_partitions_to_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, partitions))
    code, _ = kafka_error(error)
    return m.AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=tuple(
        m.AddPartitionsToTxnTopicResult(name=topic.name, results_by_partition=tuple(
            m.AddPartitionsToTxnPartitionResult(partition_index=number, partition_error_code=code)
            for number in topic.partitions))
        for topic in request.topics))


async def handle_add_offsets_to_txn(context: RequestContext, request: m.AddOffsetsToTxnRequest
                                    ) -> m.AddOffsetsToTxnResponse:
    """Include the group's offsets partition in the transaction."""
    _, error = await settle(context.calls.add_offsets_to_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id))
    code, _ = kafka_error(error)
    return m.AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)


async def handle_end_txn(context: RequestContext, request: m.EndTxnRequest) -> m.EndTxnResponse:
    """Commit or abort; answered once the decision is durable. Version 5 (transaction version 2) bumps the
    producer's epoch and answers it."""
    bump_epoch = context.version >= m.END_TXN_BUMPS_EPOCH_VERSION
    bumped, error = await settle(context.calls.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed, bump_epoch))
    code, _ = kafka_error(error)
    if not isinstance(bumped, ProducerIdAndEpoch):
        return m.EndTxnResponse(throttle_time_ms=0, error_code=code)
    return m.EndTxnResponse(throttle_time_ms=0, error_code=code, producer_id=bumped.producer_id,
                            producer_epoch=bumped.producer_epoch)


async def handle_txn_offset_commit(context: RequestContext, request: m.TxnOffsetCommitRequest
                                   ) -> m.TxnOffsetCommitResponse:
    """Commit the group's offsets inside the transaction (visible once it commits)."""
    offsets = [
        (topic.name, p.partition_index, p.committed_offset, p.committed_metadata or "", p.committed_leader_epoch)
        for topic in request.topics for p in topic.partitions
    ]
    _, error = await settle(context.calls.txn_commit_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, request.member_id,
        request.group_instance_id, request.generation_id, offsets,
        context.version >= m.TXN_OFFSET_COMMIT_ADDS_TO_TRANSACTION_VERSION))
    code, _ = kafka_error(error)
    return m.TxnOffsetCommitResponse(throttle_time_ms=0, topics=tuple(
        m.TxnOffsetCommitResponseTopic(name=topic.name, partitions=tuple(
            m.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            for p in topic.partitions))
        for topic in request.topics))


async def handle_describe_transactions(context: RequestContext, request: m.DescribeTransactionsRequest
                                       ) -> m.DescribeTransactionsResponse:
    """Each transactional id's state, producer and partitions (``kafka-transactions describe``)."""
    answers, error = await settle(context.calls.describe_transactions(request.transactional_ids))
    if error is not None:
        answers = [error] * len(request.transactional_ids)
    return m.DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=tuple(
        _described(transactional_id, answer) for transactional_id, answer in zip(request.transactional_ids, answers)))


def _described(transactional_id: str, answer: object) -> m.DescribedTransaction:
    if not isinstance(answer, TransactionDescription):
        code, _ = kafka_error(answer if isinstance(answer, BaseException) else None)
        return m.DescribedTransaction(error_code=code, transactional_id=transactional_id, transaction_state="",
                                      transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                                      producer_epoch=-1, topics=())
    return m.DescribedTransaction(
        error_code=0, transactional_id=transactional_id, transaction_state=answer.state.value,
        transaction_timeout_ms=answer.timeout_ms, transaction_start_time_ms=answer.start_ms,
        producer_id=answer.producer_id, producer_epoch=answer.producer_epoch,
        topics=tuple(m.DescribeTransactionsTopic(topic=topic, partitions=tuple(partitions))
                     for topic, partitions in by_topic(sorted(answer.partitions)).items()))


async def handle_write_txn_markers(context: RequestContext, request: m.WriteTxnMarkersRequest
                                   ) -> m.WriteTxnMarkersResponse:
    """Append a coordinator's COMMIT/ABORT markers to the partitions led here (other brokers' coordinators only)."""
    markers = [TransactionMarker(
        producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
        coordinator_epoch=marker.coordinator_epoch, committed=marker.transaction_result,
        partitions=frozenset(TopicPartition(topic.name, number)
                             for topic in marker.topics for number in topic.partition_indexes))
        for marker in request.markers]
    outcomes, error = await settle(context.calls.write_txn_markers(markers))
    codes = {(outcome.producer_id, outcome.topic_partition): kafka_error(outcome.error)[0]
             for outcome in outcomes or ()}
    everywhere, _ = kafka_error(error)
    return m.WriteTxnMarkersResponse(markers=tuple(
        m.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=tuple(
            m.WritableTxnMarkerTopicResult(name=topic.name, partitions=tuple(
                m.WritableTxnMarkerPartitionResult(partition_index=number, error_code=codes.get(
                    (marker.producer_id, TopicPartition(topic.name, number)), everywhere))
                for number in topic.partition_indexes))
            for topic in marker.topics))
        for marker in request.markers))
