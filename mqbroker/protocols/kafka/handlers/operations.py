"""ElectLeaders, DescribeLogDirs, AlterReplicaLogDirs, partition reassignments, DescribeQuorum,
DescribeTopicPartitions and ListConfigResources: what Kafka's operations tools ask a broker.

mqbroker keeps one log directory per broker (its data directory) and elects leaders itself: its
controller hands leadership back to preferred replicas on its own and never elects an
out-of-sync replica, so ElectLeaders reports what it finds rather than forcing an election.
"""

from __future__ import annotations

from collections.abc import Sequence

from mqbroker import errors
from mqbroker.model import PartitionMetadata, TopicMetadata
from mqbroker.protocols.deferreds import settle
from mqbroker.protocols.kafka.error_codes import (
    ELECTION_NOT_NEEDED,
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    LOG_DIR_NOT_FOUND,
    NO_REASSIGNMENT_IN_PROGRESS,
    PREFERRED_LEADER_NOT_AVAILABLE,
    REPLICA_NOT_AVAILABLE,
    kafka_error,
)
from mqbroker.protocols.kafka.handlers.cluster import OPERATIONS_NOT_REQUESTED, partition_answer
from mqbroker.protocols.kafka.handlers.context import RequestContext, by_topic
from mqbroker.protocols.kafka.messages import operations as m

ELECTION_PREFERRED, ELECTION_UNCLEAN = 0, 1
#: ListConfigResources resource types (Kafka's ``ConfigResource.Type``).
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
#: The Raft log Kafka's tools ask DescribeQuorum about.
CLUSTER_METADATA_TOPIC = "__cluster_metadata"


async def _topics(context: RequestContext, names: Sequence[str] | None) -> dict[str, TopicMetadata]:
    """The named topics (None: all) that exist, by name."""
    cluster = await context.calls.metadata(names, False)
    return {topic.name: topic for topic in cluster.topics if topic.error is None}


def _partition(topics: dict[str, TopicMetadata], topic: str, number: int) -> PartitionMetadata | None:
    found = topics.get(topic)
    return next((p for p in found.partitions if p.partition == number), None) if found is not None else None


async def handle_elect_leaders(context: RequestContext, request: m.ElectLeadersRequest) -> m.ElectLeadersResponse:
    """Report, per partition, that no election is needed or why mqbroker's controller will not force one."""
    if request.topic_partitions is None:
        topics = await _topics(context, None)
        wanted = [(name, p.partition) for name, topic in sorted(topics.items()) for p in topic.partitions]
    else:
        topics = await _topics(context, [entry.topic for entry in request.topic_partitions])
        wanted = [(entry.topic, number) for entry in request.topic_partitions for number in entry.partitions]
    outcomes = [(topic, _election(request.election_type, topic, _partition(topics, topic, number), number))
                for topic, number in wanted]
    if request.topic_partitions is None:  # as Kafka: "every partition" answers only those that needed one
        outcomes = [(topic, result) for topic, result in outcomes if result.error_code != ELECTION_NOT_NEEDED]
    return m.ElectLeadersResponse(throttle_time_ms=0, error_code=0, replica_election_results=tuple(
        m.ReplicaElectionResult(topic=topic, partition_result=tuple(results))
        for topic, results in by_topic(outcomes).items()))


def _unknown(topic: str, number: int) -> errors.BrokerError:
    return errors.UnknownTopicOrPartitionError(f"partition {topic}-{number} does not exist")


def _election(election_type: int, topic: str, partition: PartitionMetadata | None, number: int
              ) -> m.ElectionPartitionResult:
    if partition is None:
        code, message = kafka_error(_unknown(topic, number))
    elif election_type == ELECTION_PREFERRED:
        preferred = partition.replicas[0] if partition.replicas else -1
        code, message = (ELECTION_NOT_NEEDED, None) if partition.leader_id == preferred else (
            PREFERRED_LEADER_NOT_AVAILABLE,
            f"broker {preferred} does not lead yet: mqbroker's controller hands leadership back to the preferred "
            "replica by itself once it is in sync (every leader_imbalance_check_interval_ms)")
    elif election_type == ELECTION_UNCLEAN:
        code, message = (ELECTION_NOT_NEEDED, None) if partition.leader_id >= 0 else (
            ELIGIBLE_LEADERS_NOT_AVAILABLE, "mqbroker never elects an out-of-sync replica; bring an ISR member back")
    else:
        code, message = kafka_error(errors.InvalidRequestError(f"election type {election_type} is unknown (0 or 1)"))
    return m.ElectionPartitionResult(partition_id=number, error_code=code, error_message=message)


def _log_dir(context: RequestContext) -> str:
    entry = context.broker_configs.get("log.dirs")
    return entry.value if entry is not None else ""


async def _replica_sizes(context: RequestContext, topic: str) -> dict[int, int]:
    """Bytes of the topic's replicas on this broker ({} when the topic is gone or not visible)."""
    sizes, _ = await settle(context.calls.replica_sizes(topic))
    return sizes or {}


async def handle_describe_log_dirs(context: RequestContext, request: m.DescribeLogDirsRequest
                                   ) -> m.DescribeLogDirsResponse:
    """This broker's one log directory (its data directory) and the sizes of the replicas it holds."""
    if request.topics is None:
        wanted: dict[str, set[int] | None] = {name: None for name in sorted(await _topics(context, None))}
    else:
        wanted = {entry.topic: set(entry.partitions) for entry in request.topics}
    described = []
    for topic, partitions in wanted.items():
        sizes = await _replica_sizes(context, topic)
        held = tuple(m.DescribeLogDirsPartition(partition_index=number, partition_size=size, offset_lag=0,
                                                is_future_key=False)
                     for number, size in sorted(sizes.items()) if partitions is None or number in partitions)
        if held:
            described.append(m.DescribeLogDirsTopic(name=topic, partitions=held))
    return m.DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=(
        m.DescribeLogDirsResult(error_code=0, log_dir=_log_dir(context), topics=tuple(described)),))


async def handle_alter_replica_log_dirs(context: RequestContext, request: m.AlterReplicaLogDirsRequest
                                        ) -> m.AlterReplicaLogDirsResponse:
    """Moving a replica to the directory it is in succeeds (there is no other); any other path is not found."""
    outcomes = []
    for directory in request.dirs:
        for topic in directory.topics:
            sizes = await _replica_sizes(context, topic.name)
            for number in topic.partitions:
                code = (LOG_DIR_NOT_FOUND if directory.path != _log_dir(context)
                        else 0 if number in sizes else REPLICA_NOT_AVAILABLE)
                outcomes.append((topic.name, m.AlterReplicaLogDirPartitionResult(partition_index=number,
                                                                                 error_code=code)))
    return m.AlterReplicaLogDirsResponse(throttle_time_ms=0, results=tuple(
        m.AlterReplicaLogDirTopicResult(topic_name=topic, partitions=tuple(results))
        for topic, results in by_topic(outcomes).items()))


async def handle_alter_partition_reassignments(context: RequestContext, request: m.AlterPartitionReassignmentsRequest
                                               ) -> m.AlterPartitionReassignmentsResponse:
    """Start moving each partition to its target replicas (cancelling a move is not supported)."""
    topics = await _topics(context, [topic.name for topic in request.topics])
    outcomes = []
    for topic in request.topics:
        for target in topic.partitions:
            error = await _reassign(context, request, topics, topic.name, target)
            code, message = (error, None) if isinstance(error, int) else kafka_error(error)
            outcomes.append((topic.name, m.ReassignablePartitionResponse(
                partition_index=target.partition_index, error_code=code, error_message=message)))
    return m.AlterPartitionReassignmentsResponse(
        throttle_time_ms=0, allow_replication_factor_change=request.allow_replication_factor_change, error_code=0,
        error_message=None, responses=tuple(m.ReassignableTopicResponse(name=topic, partitions=tuple(results))
                                            for topic, results in by_topic(outcomes).items()))


async def _reassign(context: RequestContext, request: m.AlterPartitionReassignmentsRequest,
                    topics: dict[str, TopicMetadata], topic: str, target: m.ReassignablePartition
                    ) -> BaseException | int | None:
    partition = _partition(topics, topic, target.partition_index)
    if partition is None:
        return _unknown(topic, target.partition_index)
    if target.replicas is None:
        ongoing, error = await settle(context.calls.list_reassignments([topic]))
        if error is not None:
            return error
        if not any(move.partition == target.partition_index for move in ongoing or ()):
            return NO_REASSIGNMENT_IN_PROGRESS
        return errors.InvalidRequestError("mqbroker cannot cancel a reassignment; reassign to the old replicas")
    if not request.allow_replication_factor_change and len(target.replicas) != len(partition.replicas):
        return errors.InvalidReplicationFactorError(
            f"{len(target.replicas)} replicas would change the replication factor {len(partition.replicas)}, "
            "which the request does not allow")
    _, error = await settle(context.calls.reassign_partition(topic, target.partition_index, target.replicas))
    return error


async def handle_list_partition_reassignments(context: RequestContext, request: m.ListPartitionReassignmentsRequest
                                              ) -> m.ListPartitionReassignmentsResponse:
    """The reassignments in progress (of the partitions named, or all)."""
    wanted = None if request.topics is None else {
        (topic.name, number) for topic in request.topics for number in topic.partition_indexes}
    names = None if request.topics is None else [topic.name for topic in request.topics]
    ongoing, error = await settle(context.calls.list_reassignments(names))
    code, message = kafka_error(error)
    moves = [move for move in ongoing or () if wanted is None or (move.topic, move.partition) in wanted]
    return m.ListPartitionReassignmentsResponse(
        throttle_time_ms=0, error_code=code, error_message=message, topics=tuple(
            m.OngoingTopicReassignment(name=topic, partitions=tuple(partitions))
            for topic, partitions in by_topic(
                (move.topic, m.OngoingPartitionReassignment(
                    partition_index=move.partition, replicas=move.replicas, adding_replicas=move.adding_replicas,
                    removing_replicas=move.removing_replicas)) for move in moves).items()))


async def handle_describe_quorum(context: RequestContext, request: m.DescribeQuorumRequest) -> m.DescribeQuorumResponse:
    """The controller's Raft quorum as ``__cluster_metadata`` partition 0: leader, term, commit index, members."""
    quorum, error = await settle(context.calls.describe_quorum())
    if error is not None:
        code, message = kafka_error(error)
        return m.DescribeQuorumResponse(error_code=code, error_message=message, topics=())
    voters = set(quorum["voters"])
    leader = quorum["leader"]
    known_end = quorum["commit_index"]

    def state(node_id: int) -> m.ReplicaState:  # only the leader's log end is known here: its commit index
        return m.ReplicaState(replica_id=node_id, log_end_offset=known_end if node_id == leader else -1)

    observers = sorted({broker["node_id"] for broker in quorum["brokers"]} - voters)
    return m.DescribeQuorumResponse(error_code=0, topics=(m.QuorumTopicData(
        topic_name=CLUSTER_METADATA_TOPIC, partitions=(m.QuorumPartitionData(
            partition_index=0, error_code=0, leader_id=leader, leader_epoch=quorum["term"],
            high_watermark=known_end, current_voters=tuple(state(voter) for voter in sorted(voters)),
            observers=tuple(state(node_id) for node_id in observers)),)),))


async def handle_describe_topic_partitions(context: RequestContext, request: m.DescribeTopicPartitionsRequest
                                           ) -> m.DescribeTopicPartitionsResponse:
    """Topics' partitions in name order, at most ``response_partition_limit`` per page, from the cursor on."""
    names = sorted({topic.name for topic in request.topics}) if request.topics else None
    cluster = await context.calls.metadata(names, False)
    live = {endpoint.node_id for endpoint in cluster.brokers}
    cursor = request.cursor
    budget = max(1, request.response_partition_limit)
    answered, next_cursor = [], None
    for topic in sorted(cluster.topics, key=lambda found: found.name):
        if cursor is not None and topic.name < cursor.topic_name:
            continue
        first = cursor.partition_index if cursor is not None and topic.name == cursor.topic_name else 0
        partitions = [p for p in sorted(topic.partitions, key=lambda p: p.partition) if p.partition >= first]
        if len(partitions) > budget:
            next_cursor = m.Cursor(topic_name=topic.name, partition_index=partitions[budget].partition)
            partitions = partitions[:budget]
        budget -= len(partitions)
        code, _ = kafka_error(topic.error)
        answered.append(m.DescribeTopicPartitionsResponseTopic(
            error_code=code, name=topic.name, topic_id=topic.topic_id, is_internal=topic.internal,
            topic_authorized_operations=OPERATIONS_NOT_REQUESTED, partitions=tuple(
                m.DescribeTopicPartitionsResponsePartition(**partition_answer(p, live), eligible_leader_replicas=(),
                                                           last_known_elr=())  # no ELR (KIP-966); Java needs lists
                for p in partitions)))
        if next_cursor is not None:
            break
        if budget == 0:
            next_cursor = _after(cluster.topics, topic.name)
            break
    return m.DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=tuple(answered), next_cursor=next_cursor)


def _after(topics: Sequence[TopicMetadata], name: str) -> m.Cursor | None:
    """The cursor of the topic after ``name`` (None: ``name`` was the last)."""
    later = sorted(topic.name for topic in topics if topic.name > name)
    return m.Cursor(topic_name=later[0], partition_index=0) if later else None


async def handle_list_config_resources(context: RequestContext, request: m.ListConfigResourcesRequest
                                       ) -> m.ListConfigResourcesResponse:
    """The topics and this broker (the resources DescribeConfigs answers); version 0 asks for client metrics: none."""
    types = set(request.resource_types) if context.version >= 1 else set()
    if context.version >= 1 and not types:
        types = {RESOURCE_TOPIC, RESOURCE_BROKER}
    found = []
    if RESOURCE_TOPIC in types:
        found += [m.ConfigResource(resource_name=name, resource_type=RESOURCE_TOPIC)
                  for name in sorted(await _topics(context, None))]
    if RESOURCE_BROKER in types:
        found.append(m.ConfigResource(resource_name=str(context.node_id), resource_type=RESOURCE_BROKER))
    return m.ListConfigResourcesResponse(throttle_time_ms=0, error_code=0, config_resources=tuple(found))
