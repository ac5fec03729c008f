"""Pure translation of forwarded broker calls into native requests, and of the leader's answers back
into broker results (``ProduceResult``, ``FetchResult``, ...) or typed errors.

Used by the routing broker to send a front end's produce, fetch, list-offset and delete-records
calls to the partition's leader over the native protocol (the same codec the clients use).
"""

from __future__ import annotations

from collections.abc import Sequence

from mqbroker import errors
from mqbroker.model import (
    AbortedTransaction,
    Acks,
    FetchPosition,
    FetchRequest,
    FetchResult,
    IsolationLevel,
    OffsetAndTimestamp,
    ProduceResult,
)
from mqbroker.protocols.native import messages as m
from mqbroker.records.header import iter_batches


def _raise_for(error_code: int, error_message: str | None) -> None:
    if error_code:
        raise errors.error_for_code(error_code, error_message or "the partition leader refused the request")


def _only_partition(topics: Sequence[object], topic: str, partition: int) -> object:
    """The one partition result of a single-partition response (InvalidRequestError if it is missing)."""
    for entry in topics:
        if entry.name == topic:  # type: ignore[attr-defined]
            for result in entry.partitions:  # type: ignore[attr-defined]
                if result.partition_index == partition:
                    return result
    raise errors.UnknownServerError(f"the leader's answer carries no result for {topic}-{partition}")


def produce_request(
    topic: str, partition: int, records: bytes, acks: Acks, timeout_ms: int, transactional_id: str | None = None,
    add_to_transaction: bool = False,
) -> m.ProduceRequest:
    """A Produce of one partition's batches (a transactional producer's name its ``transactional_id``;
    ``add_to_transaction``: transaction version 2, the leader adds the partition)."""
    return m.ProduceRequest(acks=acks.value, timeout_ms=timeout_ms, transactional_id=transactional_id, topics=(
        m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition_index=partition, records=records),)),),
        add_to_transaction=add_to_transaction)


def last_offset_delta(records: bytes) -> int:
    """How far the last record of ``records`` lies past the first (from the batch headers only)."""
    return sum(header.last_offset_delta + 1 for _, header in iter_batches(records, check=False)) - 1


def produce_result(response: m.ProduceResponse | None, topic: str, partition: int, records: bytes) -> ProduceResult:
    """The leader's answer as a ``ProduceResult``; None (acks=0: no answer) reads as offsets -1, as in Kafka."""
    if response is None:
        return ProduceResult(base_offset=-1, last_offset=-1, log_append_time_ms=-1, log_start_offset=-1)
    result = _only_partition(response.topics, topic, partition)
    assert isinstance(result, m.ProducePartitionResult)
    _raise_for(result.error_code, result.error_message)
    return ProduceResult(base_offset=result.base_offset, last_offset=result.base_offset + last_offset_delta(records),
                         log_append_time_ms=result.log_append_time_ms, log_start_offset=result.log_start_offset)


def fetch_request(request: FetchRequest) -> m.FetchRequest:
    """A consumer's Fetch of the request's positions (replica id -1: reads stop at the high watermark, at
    read_committed at the last stable offset)."""
    by_topic: dict[str, list[m.FetchPartition]] = {}
    for position in request.positions:
        by_topic.setdefault(position.topic, []).append(m.FetchPartition(
            partition_index=position.partition, current_leader_epoch=position.current_leader_epoch,
            fetch_offset=position.offset, partition_max_bytes=position.max_bytes,
            last_fetched_epoch=position.last_fetched_epoch))
    return m.FetchRequest(max_wait_ms=request.wait_ms_max, min_bytes=request.response_bytes_min,
                          max_bytes=request.response_bytes_max, isolation_level=request.isolation_level, topics=tuple(
        m.FetchTopic(name=name, partitions=tuple(partitions)) for name, partitions in by_topic.items()))


def fetch_results(response: m.FetchResponse, positions: Sequence[FetchPosition]) -> list[FetchResult]:
    """The leader's answer as one ``FetchResult`` per position, in the positions' order."""
    by_key = {(topic.name, result.partition_index): result for topic in response.topics for result in topic.partitions}
    results = []
    for position in positions:
        found = by_key.get((position.topic, position.partition))
        if found is None:
            results.append(FetchResult(topic=position.topic, partition=position.partition, error=errors.UnknownServerError(
                f"the leader's answer carries no result for {position.topic}-{position.partition}")))
            continue
        error = errors.error_for_code(found.error_code, found.error_message or "") if found.error_code else None
        results.append(FetchResult(
            topic=position.topic, partition=position.partition, records=found.records or b"",
            high_watermark=found.high_watermark, log_start_offset=found.log_start_offset, error=error,
            diverging_epoch=found.diverging_epoch, diverging_end_offset=found.diverging_end_offset,
            last_stable_offset=found.last_stable_offset,
            aborted_transactions=None if found.aborted_transactions is None else tuple(
                AbortedTransaction(aborted.producer_id, aborted.first_offset)
                for aborted in found.aborted_transactions)))
    return results


def list_offsets_request(
    topic: str, partition: int, timestamp_ms: int, isolation_level: int = IsolationLevel.READ_UNCOMMITTED
) -> m.ListOffsetsRequest:
    """A ListOffsets of one partition (earliest -2, latest -1, or a time in ms)."""
    return m.ListOffsetsRequest(isolation_level=isolation_level, topics=(m.ListOffsetsTopic(name=topic, partitions=(
        m.ListOffsetsPartition(partition_index=partition, timestamp=timestamp_ms),)),))


def list_offset_result(response: m.ListOffsetsResponse, topic: str, partition: int) -> OffsetAndTimestamp:
    """The leader's answer as an ``OffsetAndTimestamp``."""
    result = _only_partition(response.topics, topic, partition)
    assert isinstance(result, m.ListOffsetsPartitionResult)
    _raise_for(result.error_code, result.error_message)
    return OffsetAndTimestamp(offset=result.offset, timestamp_ms=result.timestamp)


def delete_records_request(topic: str, partition: int, before_offset: int, timeout_ms: int) -> m.DeleteRecordsRequest:
    """A DeleteRecords of one partition."""
    return m.DeleteRecordsRequest(timeout_ms=timeout_ms, topics=(m.DeleteRecordsTopic(name=topic, partitions=(
        m.DeleteRecordsPartition(partition_index=partition, offset=before_offset),)),))


def delete_records_result(response: m.DeleteRecordsResponse, topic: str, partition: int) -> int:
    """The partition's new log start offset, as the leader answered."""
    result = _only_partition(response.topics, topic, partition)
    assert isinstance(result, m.DeleteRecordsPartitionResult)
    _raise_for(result.error_code, result.error_message)
    return result.low_watermark
