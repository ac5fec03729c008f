"""Topic and cluster admin (tx-light): metadata, topic creation and deletion, configs, partitions, records.

Every change is a metadata record proposed through ``IClusterView``; reads come from its image.
Internal topics (``__`` prefix) with the default replication factor are created only once that
many brokers are live, so their replicas are never fewer than asked; no client creates them, and
only a super user deletes or changes them (``ClusterPrincipals``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from twisted.internet.defer import Deferred, FirstError, gatherResults, succeed
from twisted.logger import Logger

from mqbroker import errors
from mqbroker.cluster.metadata import MetadataImage
from mqbroker.config import BrokerConfig
from mqbroker.core.guards import errors_as_failures, require_permission
from mqbroker.core.topic_config import (
    TopicConfigLayers,
    check_cluster_partitions,
    log_config_for,
    validate_broker_topic_configs,
    validate_dynamic_topic_defaults,
    validate_topic_name,
)
from mqbroker.interfaces import IAuthorizer, IClusterView
from mqbroker.limits import partitions_per_topic_max
from mqbroker.model import (
    CLUSTER_RESOURCE,
    BrokerEndpoint,
    ClusterMetadata,
    Operation,
    PartitionMetadata,
    PartitionReassignment,
    Principal,
    ResourceType,
    TopicMetadata,
    TopicSpec,
)
from mqbroker.replication.replica_manager import ReplicaManager
from mqbroker.security.cluster_principals import SERVICE, ClusterPrincipals, is_internal_topic
from mqbroker.storage.manager import LogManager

#: Defaults for compacted internal topics (offsets, MQTT and AMQP state), as Kafka's
#: ``offsets.topic.segment.bytes`` does for its offsets topic.
INTERNAL_COMPACTED_TOPIC_CONFIGS = {"segment.bytes": str(16 * 1024 * 1024), "segment.ms": str(3_600_000)}


def internal_replication_factor(config: BrokerConfig, voter_count: int) -> int:
    """Replicas of internal topics: ``offsets_topic_replication_factor``, at most one per controller voter.

    Every broker is a voter, so a single-broker cluster uses 1, whatever the setting.
    """
    return max(1, min(config.offsets_topic_replication_factor, voter_count))


def default_replication_factor(config: BrokerConfig, voter_count: int) -> int:
    """Replicas of a topic created without a factor: ``default_replication_factor``, or with -1 (the default)
    the internal topics' rule, so one broker's loss loses no data in a cluster (1 on a single broker)."""
    if config.default_replication_factor == -1:
        return internal_replication_factor(config, voter_count)
    return config.default_replication_factor


def highly_available_configs(replication_factor: int, configs: Mapping[str, str]) -> dict[str, str]:
    """``configs`` with ``min.insync.replicas`` 2 where there are at least 3 replicas and it is not set:
    an acks=all write then survives the loss of any one broker once acknowledged."""
    if replication_factor >= 3 and "min.insync.replicas" not in configs:
        return {**configs, "min.insync.replicas": "2"}
    return dict(configs)


class TopicAdmin:
    """Describes the cluster and its topics and changes them through the controller."""

    log = Logger()

    def __init__(
        self, *, config: BrokerConfig, cluster: IClusterView, authorizer: IAuthorizer, replicas: ReplicaManager,
        topics_changed: Callable[[list[str]], None], principals: ClusterPrincipals,
    ) -> None:
        """``topics_changed(names)`` runs after this broker created or grew topics (their groups rebalance)."""
        self._config = config
        self._cluster = cluster
        self._authorizer = authorizer
        self._principals = principals
        self._replicas = replicas
        self._topics_changed = topics_changed
        #: Internal topic creations waiting for enough live brokers: (count needed, waiter).
        self._live_broker_waiters: list[tuple[int, Deferred[None]]] = []

    # -- describing ------------------------------------------------------------------------

    def metadata(
        self, principal: Principal, topics: Sequence[str] | None, allow_auto_create: bool
    ) -> Deferred[ClusterMetadata]:
        """Describe the brokers and the topics from the metadata image; see ``IBroker.metadata``."""
        if topics is None or not allow_auto_create:
            return succeed(self._describe(principal, topics))
        missing = [name for name in topics if self._cluster.topic(name) is None
                   and self.may_auto_create(principal, name, Operation.DESCRIBE)]
        ensured = gatherResults([self.ensure_topic(name) for name in missing], consumeErrors=True)
        ensured.addErrback(lambda failure: failure.trap(FirstError))  # each topic's error shows in its entry
        ensured.addCallback(lambda _: self._describe(principal, topics, validate_names=self._config.auto_create_topics))
        return ensured

    def may_auto_create(self, principal: Principal, name: str, operation: Operation) -> bool:
        """True if a request of ``principal`` that may ``operation`` topic ``name`` may also create it (never an
        internal topic for a client)."""
        return ((not is_internal_topic(name) or self._principals.acts_for_cluster(principal))
                and self._authorizer.authorize(principal, operation, ResourceType.TOPIC, name))

    def _describe(
        self, principal: Principal, topics: Sequence[str] | None, validate_names: bool = False
    ) -> ClusterMetadata:
        image = self._cluster.image
        names = sorted(image.topics) if topics is None else list(topics)
        described = []
        for name in names:
            try:
                require_permission(self._authorizer, principal, Operation.DESCRIBE, ResourceType.TOPIC, name)
                record = image.topics.get(name)
                if record is None:
                    if validate_names:
                        validate_topic_name(name)
                    raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
                partitions = tuple(
                    PartitionMetadata(partition=number, leader_id=state.leader_id, leader_epoch=state.leader_epoch,
                                      replicas=tuple(state.replicas), isr=tuple(state.isr))
                    for number, state in enumerate(record.partitions)
                )
                described.append(TopicMetadata(name=name, partitions=partitions, internal=name.startswith("__"),
                                               topic_id=record.topic_id or bytes(16)))
            except errors.BrokerError as error:
                described.append(TopicMetadata(name=name, error=error))
        brokers = tuple(
            BrokerEndpoint(node_id=broker.node_id, host=broker.host, port=broker.port, listeners=broker.listeners)
            for _, broker in sorted(image.brokers.items()) if not broker.fenced
        )
        return ClusterMetadata(
            cluster_id=self._config.cluster_id, controller_id=self._cluster.controller_id(), brokers=brokers,
            topics=tuple(described),
        )

    @errors_as_failures
    def describe_configs(self, principal: Principal, topic: str) -> Deferred[dict[str, str]]:
        """Return the topic's effective configuration; see ``IBroker.describe_configs``."""
        require_permission(self._authorizer, principal, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic)
        record = self._cluster.topic(topic)
        if record is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        return succeed(self._layers(record.configs).effective())

    @errors_as_failures
    def describe_config_layers(self, principal: Principal, topic: str | None) -> Deferred[TopicConfigLayers]:
        """A topic's configuration layer by layer (None: this broker's topic defaults); see
        ``IBroker.describe_config_layers``."""
        if topic is None:
            require_permission(self._authorizer, principal, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER,
                               CLUSTER_RESOURCE)
            return succeed(self._layers({}))
        require_permission(self._authorizer, principal, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic)
        record = self._cluster.topic(topic)
        if record is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        return succeed(self._layers(record.configs))

    def _layers(self, topic_configs: Mapping[str, str]) -> TopicConfigLayers:
        """The layers of a topic with ``topic_configs`` on this broker."""
        return TopicConfigLayers.of(self._config.topic_defaults, self._cluster.image.broker_configs,
                                    self._config.node_id, topic_configs)

    @errors_as_failures
    def describe_quorum(self, principal: Principal) -> Deferred[dict[str, Any]]:
        """The controller quorum and brokers; see ``IBroker.describe_quorum``."""
        require_permission(self._authorizer, principal, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_RESOURCE)
        return succeed(self._cluster.describe())

    @errors_as_failures
    def replica_sizes(self, principal: Principal, topic: str, logs: LogManager) -> Deferred[dict[int, int]]:
        """Bytes on disk of ``topic``'s replicas in ``logs`` (this broker's); see ``IBroker.replica_sizes``."""
        require_permission(self._authorizer, principal, Operation.DESCRIBE, ResourceType.TOPIC, topic)
        if self._cluster.topic(topic) is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        return succeed({partition: logs.get(name, partition).size_bytes for name, partition in logs.partitions() if name == topic})

    @errors_as_failures
    def list_reassignments(
        self, principal: Principal, topics: Sequence[str] | None
    ) -> Deferred[list[PartitionReassignment]]:
        """The reassignments in progress; see ``IBroker.list_reassignments``."""
        require_permission(self._authorizer, principal, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_RESOURCE)
        return succeed(self._replicas.reassignments(topics))

    # -- creating --------------------------------------------------------------------------

    @errors_as_failures
    def create_topic(self, principal: Principal, spec: TopicSpec, validate_only: bool) -> Deferred[None]:
        """Create a topic through the controller; see ``IBroker.create_topic``."""
        self._principals.check_internal_write(principal, spec.name)
        require_permission(self._authorizer, principal, Operation.CREATE, ResourceType.TOPIC, spec.name)
        if self._cluster.topic(spec.name) is not None:
            raise errors.TopicAlreadyExistsError(f"topic {spec.name!r} already exists")
        spec = self._with_default_replicas(spec, front_end=principal.kind == SERVICE)
        self._check_topic_spec(spec)
        if validate_only:
            return succeed(None)
        return self._create_topic_now(spec)

    @errors_as_failures
    def ensure_topic(self, name: str) -> Deferred[None]:
        """Fire once ``name`` exists, creating it with the defaults if ``auto_create_topics`` allows."""
        if self._cluster.topic(name) is not None or not self._config.auto_create_topics:
            return succeed(None)
        validate_topic_name(name)
        return self.create_if_missing(self._with_default_replicas(TopicSpec(name=name), front_end=False))

    def create_if_missing(self, spec: TopicSpec) -> Deferred[None]:
        """Create ``spec`` on the broker's own account unless it exists (internal: once enough brokers are live)."""
        created = self._create_topic_now(spec)
        created.addErrback(lambda failure: failure.trap(errors.TopicAlreadyExistsError))
        return created

    def _with_default_replicas(self, spec: TopicSpec, *, front_end: bool) -> TopicSpec:
        """A non-internal topic's spec with its default replication factor filled in.

        Front ends' topics for client data always get the internal topics' factor; clients' topics get
        ``default_replication_factor``, whose automatic value (-1) is the same rule. The automatic factor
        shrinks to the brokers live now (a creation never hangs on a dead broker), and brings
        ``min.insync.replicas`` 2 when it reaches 3.
        """
        if spec.replication_factor != -1 or spec.name.startswith("__"):
            return spec
        if not (front_end or self._config.default_replication_factor == -1):
            return dataclasses.replace(spec, replication_factor=self._config.default_replication_factor)
        replication = internal_replication_factor(self._config, len(self._cluster.voters))
        replication = max(1, min(replication, len(self._cluster.image.live_brokers())))
        return dataclasses.replace(spec, replication_factor=replication,
                                   configs=highly_available_configs(replication, spec.configs))

    def _check_topic_spec(self, spec: TopicSpec) -> None:
        validate_topic_name(spec.name)
        partitions = self._config.default_partitions if spec.partitions == -1 else spec.partitions
        if not 1 <= partitions <= partitions_per_topic_max:
            raise errors.InvalidPartitionsError(
                f"a topic needs 1..{partitions_per_topic_max} partitions, got {partitions}"
            )
        replication = self._replication_factor(spec)
        live = len(self._cluster.image.live_brokers())
        if _is_internal_default(spec):
            live = max(live, replication)  # its creation waits for that many live brokers
        if not 1 <= replication <= max(live, 1):
            raise errors.InvalidReplicationFactorError(
                f"replication factor {replication} needs that many live brokers; {live} are live"
            )
        validate_broker_topic_configs(spec.configs)
        log_config_for(self._layers({}).broker_defaults(), spec.configs)
        if not is_internal_topic(spec.name):  # the broker's own few are never refused
            check_cluster_partitions(self._partition_count(), partitions, self._config.cluster_partitions_max)

    def _partition_count(self) -> int:
        """Partitions the cluster holds (every topic's)."""
        return sum(len(record.partitions) for record in self._cluster.image.topics.values())

    def _create_topic_now(self, spec: TopicSpec) -> Deferred[None]:
        """Propose the topic (an internal one once enough brokers are live to hold all its replicas)."""
        if not _is_internal_default(spec):
            return self._propose_topic(spec)
        if "compact" in spec.configs.get("cleanup.policy", ""):
            # Only sealed segments are compacted: small segments keep internal state compact.
            spec = dataclasses.replace(spec, configs={**INTERNAL_COMPACTED_TOPIC_CONFIGS, **spec.configs})
        needed = self._replication_factor(spec)
        if len(self._cluster.image.live_brokers()) < needed:
            self.log.info("creating internal topic {topic} once {count} brokers are live (replication factor)",
                          topic=spec.name, count=needed)
        ready = self._when_live_brokers(needed)
        ready.addCallback(lambda _: self._propose_topic(spec))
        return ready

    @errors_as_failures
    def _propose_topic(self, spec: TopicSpec) -> Deferred[None]:
        """Propose the topic; every broker hosting one of its partitions creates the log when it applies the record."""
        self._check_topic_spec(spec)
        partitions = self._config.default_partitions if spec.partitions == -1 else spec.partitions
        created = self._cluster.create_topic(spec.name, partitions, dict(spec.configs), self._replication_factor(spec))
        created.addCallback(lambda _: self._topics_changed([spec.name]))
        return created

    def _replication_factor(self, spec: TopicSpec) -> int:
        """The spec's factor, else the default; internal topics get ``internal_replication_factor``."""
        if spec.replication_factor != -1:
            return spec.replication_factor
        if spec.name.startswith("__"):
            return internal_replication_factor(self._config, len(self._cluster.voters))
        return default_replication_factor(self._config, len(self._cluster.voters))

    def _when_live_brokers(self, count: int) -> Deferred[None]:
        """Fire once at least ``count`` brokers are registered and unfenced."""
        if len(self._cluster.image.live_brokers()) >= count:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._live_broker_waiters.append((count, waiter))
        return waiter

    def wake_live_broker_waiters(self, image: MetadataImage) -> None:
        """The image changed: go on with the internal topic creations that now have enough live brokers."""
        live = len(image.live_brokers())
        ready = [waiter for count, waiter in self._live_broker_waiters if count <= live]
        self._live_broker_waiters = [(count, waiter) for count, waiter in self._live_broker_waiters if count > live]
        for waiter in ready:
            waiter.callback(None)

    # -- changing --------------------------------------------------------------------------

    @errors_as_failures
    def delete_topic(self, principal: Principal, name: str) -> Deferred[None]:
        """Delete a topic and its data everywhere; see ``IBroker.delete_topic``."""
        self._principals.check_internal_admin(principal, name, "delete")
        require_permission(self._authorizer, principal, Operation.DELETE, ResourceType.TOPIC, name)
        if self._cluster.topic(name) is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return self._cluster.delete_topic(name)

    @errors_as_failures
    def alter_configs(
        self, principal: Principal, topic: str, set_configs: Mapping[str, str], delete_configs: Sequence[str]
    ) -> Deferred[None]:
        """Change topic config overrides through the controller; see ``IBroker.alter_configs``."""
        self._principals.check_internal_admin(principal, topic, "alter the configuration of")
        require_permission(self._authorizer, principal, Operation.ALTER_CONFIGS, ResourceType.TOPIC, topic)
        record = self._cluster.topic(topic)
        if record is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        configs = {k: v for k, v in record.configs.items() if k not in set(delete_configs)}
        configs.update(set_configs)
        validate_broker_topic_configs(configs)
        log_config_for(self._layers({}).broker_defaults(), configs)
        return self._cluster.alter_configs(topic, configs)

    @errors_as_failures
    def alter_broker_configs(self, principal: Principal, broker_id: int | None, set_configs: Mapping[str, str],
                             delete_configs: Sequence[str], validate_only: bool = False) -> Deferred[None]:
        """Change the dynamic topic defaults of the cluster (``broker_id`` None) or of one broker through the
        controller; see ``IBroker.alter_broker_configs``."""
        require_permission(self._authorizer, principal, Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_RESOURCE)
        if broker_id is not None and broker_id < 1:
            raise errors.InvalidRequestError(f"broker id {broker_id} is not valid: broker ids start at 1")
        entity = "" if broker_id is None else str(broker_id)
        image = self._cluster.image
        configs = {key: value for key, value in image.broker_configs.get(entity, {}).items() if key not in delete_configs}
        configs.update(set_configs)
        proposed = {**image.broker_configs, entity: configs}
        # As a topic without overrides takes them: on this broker (the cluster's) or on the broker named.
        layers = TopicConfigLayers.of(self._config.topic_defaults, proposed,
                                      self._config.node_id if broker_id is None else broker_id)
        if broker_id is not None and "min.insync.replicas" in set_configs:
            raise errors.InvalidConfigError(
                "min.insync.replicas is cluster-wide (as in Kafka with eligible leader replicas): set it for the "
                "cluster (broker resource \"\", kafka-configs --entity-default) or per topic")
        try:
            validate_dynamic_topic_defaults(layers)
        except errors.InvalidConfigError as error:  # a broker config's value: Kafka answers INVALID_REQUEST
            raise errors.InvalidRequestError(error.message) from None
        if validate_only:
            return succeed(None)
        return self._cluster.alter_broker_configs(entity, dict(set_configs), list(delete_configs))

    @errors_as_failures
    def create_partitions(self, principal: Principal, topic: str, total_count: int) -> Deferred[None]:
        """Grow a topic through the controller; see ``IBroker.create_partitions``."""
        self._principals.check_internal_admin(principal, topic, "add partitions to")
        require_permission(self._authorizer, principal, Operation.ALTER, ResourceType.TOPIC, topic)
        record = self._cluster.topic(topic)
        if record is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        if not len(record.partitions) < total_count <= partitions_per_topic_max:
            raise errors.InvalidPartitionsError(
                f"topic {topic!r} has {len(record.partitions)} partitions; the new count must be larger "
                f"(and at most {partitions_per_topic_max}), got {total_count}"
            )
        if not is_internal_topic(topic):
            check_cluster_partitions(self._partition_count(), total_count - len(record.partitions),
                                     self._config.cluster_partitions_max)
        grown = self._cluster.create_partitions(topic, total_count)
        grown.addCallback(lambda _: self._topics_changed([topic]))
        return grown

    @errors_as_failures
    def reassign_partition(
        self, principal: Principal, topic: str, partition: int, target_replicas: Sequence[int]
    ) -> Deferred[None]:
        """Move a partition's replicas through the controller; see ``IBroker.reassign_partition``.

        Internal topics too (raising ``__consumer_offsets``' replication factor is routine): a move keeps
        every record, so the topic ALTER permission decides, as for any topic."""
        require_permission(self._authorizer, principal, Operation.ALTER, ResourceType.TOPIC, topic)
        return self._replicas.reassign(topic, partition, target_replicas)

    @errors_as_failures
    def delete_records(self, principal: Principal, topic: str, partition: int, before_offset: int) -> Deferred[int]:
        """Advance the log start offset; see ``IBroker.delete_records``."""
        self._principals.check_internal_admin(principal, topic, "delete records of")
        require_permission(self._authorizer, principal, Operation.DELETE, ResourceType.TOPIC, topic)
        partition_log = self._replicas.partition_log(topic, partition)
        high_watermark = self._replicas.high_watermark(partition_log)
        target = high_watermark if before_offset == -1 else before_offset
        if not partition_log.log_start_offset <= target <= high_watermark:
            raise errors.OffsetOutOfRangeError(
                f"cannot delete records before {target}: {topic}-{partition} holds "
                f"{partition_log.log_start_offset}..{high_watermark}"
            )
        partition_log.delete_records_before(target)
        return succeed(partition_log.log_start_offset)

    def stop(self) -> None:
        """Fail the internal topic creations still waiting for live brokers (shutdown)."""
        waiters, self._live_broker_waiters = self._live_broker_waiters, []
        for _, waiter in waiters:
            waiter.errback(errors.BrokerShuttingDownError("the broker is shutting down"))


def _is_internal_default(spec: TopicSpec) -> bool:
    """An internal topic (``__`` prefix) created with the internal replication factor."""
    return spec.name.startswith("__") and spec.replication_factor == -1
