"""This broker's partition logs, kept in step with the metadata image (tx-light: no I/O beyond storage calls).

A broker holds a log for every partition it has a replica of: created when the image assigns it
one, reconfigured when the topic's configs change, deleted when the topic is deleted or a
reassignment moved the replica away. Leadership is the replica manager's business; this is only
where the data lives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from twisted.internet.interfaces import IReactorTime

from mqbroker.cluster.metadata import MetadataImage, TopicState
from mqbroker.cluster.metadata_records import (
    AlterBrokerConfigs,
    AlterPartition,
    AlterTopicConfigs,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    ReassignPartition,
    Record,
)
from mqbroker.config import BrokerConfig
from mqbroker.core.topic_config import TopicConfigLayers, log_config_for
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.manager import LogManager


class LocalLogs:
    """Creates, reconfigures and deletes the local partition logs as the metadata image says."""

    def __init__(
        self, *, config: BrokerConfig, clock: IReactorTime, logs: LogManager,
        before_delete: Callable[[PartitionLog], None],
    ) -> None:
        """``before_delete(log)`` runs before a local log is deleted (the broker answers the fetches waiting on it)."""
        self._config = config
        self._clock = clock
        self._logs = logs
        self._before_delete = before_delete

    def image_changed(self, image: MetadataImage, record: Record | None) -> None:
        """Bring the logs in step with ``image`` after ``record`` (None: compare every partition)."""
        match record:
            case CreateTopic(name=name) | CreatePartitions(name=name) | AlterTopicConfigs(name=name):
                self._sync_topic(self._broker_defaults(image), image.topics[name])
            case DeleteTopic(name=name):
                self._remove(name, keep=set())
            case None | AlterPartition() | ReassignPartition() | AlterBrokerConfigs():
                self._sync_all(image)

    def _sync_all(self, image: MetadataImage) -> None:
        """Create what this broker hosts, delete the rest."""
        hosted = set(image.partitions_hosted(self._config.node_id))
        broker_defaults = self._broker_defaults(image)  # once, not per topic: a sync may cover thousands
        for topic in image.topics.values():
            self._sync_topic(broker_defaults, topic)
        for topic, partition in self._logs.partitions():
            if (topic, partition) not in hosted:
                self._remove(topic, keep=hosted)

    def _broker_defaults(self, image: MetadataImage) -> dict[str, str]:
        """This broker's topic defaults in force: static ``log.`` ones under the dynamic ones of ``image``."""
        layers = TopicConfigLayers.of(self._config.topic_defaults, image.broker_configs, self._config.node_id)
        return layers.broker_defaults()

    def _sync_topic(self, broker_defaults: Mapping[str, str], topic: TopicState) -> None:
        log_config = log_config_for(broker_defaults, topic.configs)
        local = set(self._logs.partitions())
        missing = []
        for number, partition in enumerate(topic.partitions):
            if self._config.node_id not in partition.replicas:
                continue
            if (topic.name, number) in local:
                self._logs.get(topic.name, number).reconfigure(log_config)
            else:
                missing.append(number)
        if missing:  # together: a topic of thousands of partitions shares its fsyncs
            self._logs.create_many(topic.name, missing, log_config, int(self._clock.seconds() * 1000))

    def _remove(self, name: str, keep: set[tuple[str, int]]) -> None:
        for topic, partition in self._logs.partitions():
            if topic == name and (topic, partition) not in keep:
                self._before_delete(self._logs.get(topic, partition))
                self._logs.delete(topic, partition)
