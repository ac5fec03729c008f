"""Topic admin: CreateTopics, DeleteTopics, CreatePartitions and DeleteRecords (configs: ``handlers.configs``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mqbroker import errors
from mqbroker.model import TopicMetadata
from mqbroker.protocols.deferreds import gathered, settle, settled
from mqbroker.protocols.kafka.error_codes import UNKNOWN_TOPIC_ID, kafka_error
from mqbroker.protocols.kafka.handlers.context import RequestContext, by_topic
from mqbroker.protocols.kafka.messages import admin as m
from mqbroker.protocols.schema import ZERO_UUID



async def handle_create_topics(context: RequestContext, request: m.CreateTopicsRequest) -> m.CreateTopicsResponse:
    """Create topics (all at once), one result each with the partition count and replication factor created."""
    async def create(topic: m.CreatableTopic) -> m.CreatableTopicResult:
        ordered = sorted(topic.assignments, key=lambda assignment: assignment.partition_index)
        chosen = [tuple(assignment.broker_ids) for assignment in ordered]
        partitions, replication_factor = topic.num_partitions, topic.replication_factor
        error = await _check_placement(context, chosen, range(len(chosen)),
                                       [assignment.partition_index for assignment in ordered])
        if chosen and error is None:
            if (partitions, replication_factor) != (-1, -1):
                error = errors.InvalidRequestError("give either replica assignments or a partition count and "
                                                   "replication factor (-1), not both")
            partitions, replication_factor = len(chosen), len(chosen[0])
        if error is None:
            configs = {config.name: config.value for config in topic.configs if config.value is not None}
            _, error = await settle(context.calls.create_topic(topic.name, partitions, replication_factor, configs,
                                                               request.validate_only))
        if error is None and chosen and not request.validate_only:
            error = await _place(context, topic.name, 0, chosen)
        created = await _described(context, topic.name) if error is None and not request.validate_only else None
        if created is not None:
            partitions, replication_factor = len(created.partitions), len(created.partitions[0].replicas)
        code, message = kafka_error(error)
        return m.CreatableTopicResult(name=topic.name, error_code=code, error_message=message,
                                      topic_id=created.topic_id if created is not None else ZERO_UUID,
                                      num_partitions=partitions if error is None else -1,
                                      replication_factor=replication_factor if error is None else -1)

    results = [await create(topic) for topic in request.topics]
    return m.CreateTopicsResponse(throttle_time_ms=0, topics=tuple(results))


async def _described(context: RequestContext, name: str) -> TopicMetadata | None:
    """Topic ``name`` with its partitions (None: it has none, or cannot be described)."""
    cluster, _ = await settle(context.calls.metadata([name], False))
    return next((topic for topic in (cluster.topics if cluster else ()) if topic.name == name and topic.partitions),
                None)


async def _check_placement(context: RequestContext, chosen: list[tuple[int, ...]], wanted: range,
                           given: Sequence[int]) -> BaseException | None:
    """Why client-chosen replicas cannot be used (None: they can): every partition in ``wanted`` needs one
    assignment, of live brokers, none repeated, all of one length."""
    if not chosen:
        return None
    if list(given) != list(wanted):
        return errors.InvalidReplicaAssignmentError(
            f"assignments must name partitions {wanted.start}..{wanted.stop - 1}, one each; got {list(given)}")
    cluster = await context.calls.metadata([], False)
    live = {endpoint.node_id for endpoint in cluster.brokers}
    for replicas in chosen:
        unknown = sorted(set(replicas) - live)
        if unknown or not replicas or len(set(replicas)) != len(replicas) or len(replicas) != len(chosen[0]):
            return errors.InvalidReplicaAssignmentError(
                f"replicas {list(replicas)} are not usable: each partition needs the same number of distinct live "
                f"brokers ({sorted(live)})" + (f"; broker {unknown[0]} is not registered" if unknown else ""))
    return None


async def _place(context: RequestContext, topic: str, first: int, chosen: list[tuple[int, ...]]) -> BaseException | None:
    """Move new partitions ``first``... to the replicas the client chose: mqbroker places them, then reassigns
    them (empty, they move at once; a partition already there is left alone)."""
    for number, replicas in enumerate(chosen, start=first):
        _, error = await settle(context.calls.reassign_partition(topic, number, replicas))
        if error is not None:
            return error
    return None


async def handle_delete_topics(context: RequestContext, request: m.DeleteTopicsRequest) -> m.DeleteTopicsResponse:
    """Delete topics by name, or by topic id from version 6 (answered with both)."""
    wanted = ([(name, ZERO_UUID) for name in request.topic_names] if context.version < 6
              else [(topic.name, topic.topic_id) for topic in request.topics])
    known = {topic.name: topic.topic_id for topic in (await context.calls.metadata(None, False)).topics}
    names_by_id = {topic_id: name for name, topic_id in known.items()}
    results = []
    for name, topic_id in wanted:
        name = name if name is not None else names_by_id.get(topic_id)
        if name is None:
            code, message = UNKNOWN_TOPIC_ID, f"no topic has the id {topic_id.hex()}"
        else:
            topic_id = known.get(name, topic_id)
            _, error = await settle(context.calls.delete_topic(name))
            code, message = kafka_error(error)
        results.append(m.DeletableTopicResult(name=name, topic_id=topic_id, error_code=code, error_message=message))
    return m.DeleteTopicsResponse(throttle_time_ms=0, responses=tuple(results))


async def handle_create_partitions(context: RequestContext, request: m.CreatePartitionsRequest) -> m.CreatePartitionsResponse:
    """Grow topics, one outcome each."""
    results = []
    for topic in request.topics:
        chosen = [tuple(entry.broker_ids) for entry in topic.assignments or ()]
        error: BaseException | None = None
        grown = await _described(context, topic.name) if chosen else None
        first = len(grown.partitions) if grown is not None else -1
        if first >= 0:  # (an unknown topic fails below)
            error = await _check_placement(context, chosen, range(first, topic.count), range(first, first + len(chosen)))
        if error is None and not request.validate_only:
            _, error = await settle(context.calls.create_partitions(topic.name, topic.count))
            if error is None and chosen:
                error = await _place(context, topic.name, first, chosen)
        code, message = kafka_error(error)
        results.append(m.CreatePartitionsTopicResult(name=topic.name, error_code=code, error_message=message))
    return m.CreatePartitionsResponse(throttle_time_ms=0, results=tuple(results))


async def handle_delete_records(context: RequestContext, request: m.DeleteRecordsRequest) -> m.DeleteRecordsResponse:
    """Move log start offsets forward (-1: to the high watermark)."""
    deletions = [
        settled(context.calls.delete_records(topic.name, partition.partition_index, partition.offset))
        .addCallback(_deleted, topic.name, partition.partition_index)
        for topic in request.topics for partition in topic.partitions
    ]
    answers = await gathered(deletions)
    return m.DeleteRecordsResponse(throttle_time_ms=0, topics=tuple(
        m.DeleteRecordsTopicResult(name=name, partitions=tuple(results)) for name, results in by_topic(answers).items()))


def _deleted(outcome: tuple[Any, BaseException | None], topic: str, partition: int) -> tuple[str, Any]:
    low, error = outcome
    return topic, m.DeleteRecordsPartitionResult(partition_index=partition, error_code=kafka_error(error)[0],
                                                 low_watermark=low if low is not None else -1)
