"""Keeping the mirrored topics in step: created with the source's partition count, grown with it, and
their configuration kept equal to the source's (Twisted driver over a pure comparison).

Only keys both clusters know are compared, and never the ones that belong to a cluster rather
than to a topic's data (``UNSYNCED_CONFIGS``). A topic is created with the source's partition
count (the partitioning is preserved: partition ``p`` is copied into partition ``p``) and then
given the differing keys, so the target's own defaults stay defaults where they agree.
"""

from __future__ import annotations

from collections.abc import Mapping

from twisted.logger import Logger

from mqbroker import errors
from mqbroker.connectors.broker_calls import ConnectorBroker
from mqbroker.connectors.mirror.naming import mirrored, remote_topic
from mqbroker.connectors.mirror.settings import MirrorSettings
from mqbroker.connectors.mirror.source import IMirrorSource
from mqbroker.model import TopicSpec

#: Keys that depend on the cluster (its size, its replication throttles), not on the topic's data.
UNSYNCED_CONFIGS = frozenset({"min.insync.replicas", "leader.replication.throttled.replicas",
                              "follower.replication.throttled.replicas"})

log = Logger()


def config_changes(source: Mapping[str, str], target: Mapping[str, str]) -> dict[str, str]:
    """The keys to set here so that the topic's configuration equals the source's."""
    return {key: value for key, value in source.items()
            if key in target and target[key] != value and key not in UNSYNCED_CONFIGS}


async def sync_topics(settings: MirrorSettings, source: IMirrorSource, broker: ConnectorBroker,
                      topics: Mapping[str, int]) -> tuple[dict[str, int], list[str]]:
    """Create, grow and configure the remote topics of the mirrored ``topics`` ({name: source partitions}).

    Returns each mirrored topic's partitions that exist here now, and the problems met (one line
    each: a name too long here, a key the target refuses); other topics go on meanwhile.
    """
    ready: dict[str, int] = {}
    problems: list[str] = []
    for topic, count in sorted(topics.items()):
        if not mirrored(settings, topic):
            continue
        remote = remote_topic(settings, topic)
        try:
            ready[topic] = await _shape(settings, source, broker, topic, remote, count)
        except errors.BrokerError as error:
            problems.append(f"mirroring {topic} into {remote}: {error.message}")
    return ready, problems


async def _shape(settings: MirrorSettings, source: IMirrorSource, broker: ConnectorBroker, topic: str, remote: str,
                 count: int) -> int:
    """Give ``remote`` the source's partition count and configuration; return its partitions here."""
    try:
        existing = len(await broker.partitions(remote))
    except errors.UnknownTopicOrPartitionError:
        if await broker.create_topic(TopicSpec(name=remote, partitions=count,
                                               replication_factor=settings.replication_factor)):
            log.info("mirror: created {remote} with {count} partitions for {topic}", remote=remote, count=count,
                     topic=topic)
        existing = len(await broker.partitions(remote))
    if existing < count:
        try:
            await broker.grow_topic(remote, count)
            log.info("mirror: grew {remote} to {count} partitions as {topic}", remote=remote, count=count, topic=topic)
        except errors.InvalidPartitionsError:
            pass  # another task grew it meanwhile
        existing = len(await broker.partitions(remote))
    if settings.sync_topic_configs:
        changes = config_changes(await source.topic_configs(topic), await broker.topic_configs(remote))
        if changes:
            await broker.alter_topic_configs(remote, changes, ())
            log.info("mirror: {remote} takes {topic}'s configuration {changes}", remote=remote, topic=topic,
                     changes=changes)
    return min(existing, count)
