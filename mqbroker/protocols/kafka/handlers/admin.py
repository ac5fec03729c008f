"""Topic and configuration admin: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords and configs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mqbroker import errors
from mqbroker.model import TopicMetadata
from mqbroker.protocols.deferreds import gathered, settle, settled
from mqbroker.protocols.kafka.config_catalog import config_type
from mqbroker.protocols.kafka.error_codes import UNKNOWN_TOPIC_ID, kafka_error
from mqbroker.protocols.kafka.handlers.context import RequestContext, by_topic
from mqbroker.protocols.kafka.messages import admin as m
from mqbroker.protocols.schema import ZERO_UUID

#: Kafka's ConfigResource types and config sources (DescribeConfigs).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
#: IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


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


def _static_broker(resource: m.IncrementalAlterConfigsResource) -> errors.BrokerError | None:
    """Deleting a broker's dynamic keys succeeds (it has none: its settings are static, as
    ``kafka-reassign-partitions`` clearing throttles expects); setting one is refused."""
    if all(change.config_operation == DELETE for change in resource.configs):
        return None
    return errors.InvalidRequestError("mqbroker's broker settings are static: set them in the broker's configuration "
                                      "file or command line and restart it")


def _not_a_topic(resource_type: int) -> errors.BrokerError | None:
    if resource_type == RESOURCE_TOPIC:
        return None
    return errors.InvalidRequestError(f"only topic configurations (resource type 2) are served, not type {resource_type}")


def _source(context: RequestContext, key: str, value: str) -> int:
    """Where a key's value comes from: the topic's override, a broker-wide ``log.`` default, or the built-in default."""
    if context.topic_config_defaults.get(key) != value:
        return SOURCE_DYNAMIC_TOPIC
    return SOURCE_STATIC_BROKER if key in context.broker_topic_defaults else SOURCE_DEFAULT


async def _overrides(context: RequestContext, topic: str) -> dict[str, str]:
    """The keys a topic overrides (those whose value differs from the broker's default)."""
    effective = await context.calls.describe_configs(topic)
    return {key: value for key, value in effective.items() if _source(context, key, value) == SOURCE_DYNAMIC_TOPIC}


async def handle_describe_configs(context: RequestContext, request: m.DescribeConfigsRequest) -> m.DescribeConfigsResponse:
    """Effective topic configurations (overrides are DYNAMIC_TOPIC_CONFIG) and this broker's own settings."""
    results = []
    for resource in request.resources:
        wanted = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        entries: list[m.DescribeConfigsResourceResult] = []
        error: BaseException | None = None
        if resource.resource_type == RESOURCE_BROKER:
            error = _not_this_broker(context, resource.resource_name)
            if error is None and resource.resource_name:  # "": the cluster-wide dynamic defaults, which mqbroker has none of
                entries = [
                    m.DescribeConfigsResourceResult(name=key, value=entry.value, read_only=True,
                                                    config_source=entry.source, is_sensitive=False, synonyms=(),
                                                    config_type=entry.type)
                    for key, entry in sorted(context.broker_configs.items())]
        else:
            error = _not_a_topic(resource.resource_type)
            configs: Mapping[str, str] | None = None
            if error is None:
                configs, error = await settle(context.calls.describe_configs(resource.resource_name))
            entries = [
                m.DescribeConfigsResourceResult(name=key, value=str(value), read_only=False,
                                                config_source=_source(context, key, str(value)), is_sensitive=False,
                                                synonyms=(), config_type=config_type(key))
                for key, value in sorted((configs or {}).items())]
        code, message = kafka_error(error)
        results.append(m.DescribeConfigsResult(error_code=code, error_message=message,
                                               resource_type=resource.resource_type,
                                               resource_name=resource.resource_name,
                                               configs=tuple(entry for entry in entries
                                                             if wanted is None or entry.name in wanted)))
    return m.DescribeConfigsResponse(throttle_time_ms=0, results=tuple(results))


def _not_this_broker(context: RequestContext, name: str) -> errors.BrokerError | None:
    """A broker resource names this broker, or (empty) the cluster-wide dynamic defaults."""
    if name in ("", str(context.node_id)):
        return None
    return errors.InvalidRequestError(f"broker {name!r} is described by that broker itself; this is broker "
                                      f"{context.node_id} (send the request to the broker it names)")


async def handle_alter_configs(context: RequestContext, request: m.AlterConfigsRequest) -> m.AlterConfigsResponse:
    """Replace topics' whole configurations: the keys named are set, every other override is reset."""
    results = []
    for resource in request.resources:
        error = _not_a_topic(resource.resource_type)
        if error is None:
            wanted = {config.name: config.value for config in resource.configs if config.value is not None}
            try:
                current = await _overrides(context, resource.resource_name)
                if not request.validate_only:
                    reset = [key for key in current if key not in wanted]
                    await context.calls.alter_configs(resource.resource_name, wanted, reset)
            except errors.BrokerError as refused:
                error = refused
        results.append(_altered(resource.resource_type, resource.resource_name, error))
    return m.AlterConfigsResponse(throttle_time_ms=0, responses=tuple(results))


def _altered(resource_type: int, name: str, error: BaseException | None) -> m.AlterConfigsResourceResponse:
    code, message = kafka_error(error)
    return m.AlterConfigsResourceResponse(error_code=code, error_message=message, resource_type=resource_type,
                                          resource_name=name)


def _list_value(current: str | None) -> list[str]:
    return [item for item in (current or "").split(",") if item]


async def handle_incremental_alter_configs(context: RequestContext,
                                           request: m.IncrementalAlterConfigsRequest) -> m.IncrementalAlterConfigsResponse:
    """Set, reset, append to or subtract from some keys of topics' configurations."""
    results = []
    for resource in request.resources:
        if resource.resource_type == RESOURCE_BROKER:
            results.append(_altered(resource.resource_type, resource.resource_name, _static_broker(resource)))
            continue
        error = _not_a_topic(resource.resource_type)
        if error is None:
            effective, error = await settle(context.calls.describe_configs(resource.resource_name))
        if error is None:
            set_configs: dict[str, str] = {}
            delete_configs: list[str] = []
            for change in resource.configs:
                if change.config_operation == SET:
                    set_configs[change.name] = change.value or ""
                elif change.config_operation == DELETE:
                    delete_configs.append(change.name)
                elif change.config_operation in (APPEND, SUBTRACT):
                    items = _list_value(set_configs.get(change.name, effective.get(change.name)))
                    given = _list_value(change.value)
                    items = items + [i for i in given if i not in items] if change.config_operation == APPEND \
                        else [i for i in items if i not in given]
                    set_configs[change.name] = ",".join(items)
                else:
                    error = errors.InvalidRequestError(f"config operation {change.config_operation} is unknown")
            if error is None and not request.validate_only:
                _, error = await settle(context.calls.alter_configs(resource.resource_name, set_configs, delete_configs))
        results.append(_altered(resource.resource_type, resource.resource_name, error))
    return m.IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=tuple(results))
