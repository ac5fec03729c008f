"""AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit: a transactional producer's calls.

The first three go to the transactional id's coordinator, TxnOffsetCommit to the group's; the
broker core checks permissions and fencing. A call's one outcome is reported on every partition
it named (a transaction takes them together or not at all).
"""

from __future__ import annotations

from mqbroker.protocols.deferreds import settle
from mqbroker.protocols.kafka.error_codes import kafka_error
from mqbroker.protocols.kafka.handlers.context import RequestContext
from mqbroker.protocols.kafka.messages import transactions as m


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
    """Commit or abort; answered once the decision is durable."""
    _, error = await settle(context.calls.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed))
    code, _ = kafka_error(error)
    return m.EndTxnResponse(throttle_time_ms=0, error_code=code)


async def handle_txn_offset_commit(context: RequestContext, request: m.TxnOffsetCommitRequest
                                   ) -> m.TxnOffsetCommitResponse:
    """Commit the group's offsets inside the transaction (visible once it commits)."""
    offsets = [
        (topic.name, p.partition_index, p.committed_offset, p.committed_metadata or "", p.committed_leader_epoch)
        for topic in request.topics for p in topic.partitions
    ]
    _, error = await settle(context.calls.txn_commit_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, request.member_id,
        request.group_instance_id, request.generation_id, offsets))
    code, _ = kafka_error(error)
    return m.TxnOffsetCommitResponse(throttle_time_ms=0, topics=tuple(
        m.TxnOffsetCommitResponseTopic(name=topic.name, partitions=tuple(
            m.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            for p in topic.partitions))
        for topic in request.topics))
