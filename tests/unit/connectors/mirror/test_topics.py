"""Which configuration keys a mirror sets on its remote topics."""

from __future__ import annotations

from mqbroker.connectors.mirror.topics import config_changes


def test_only_differing_keys_both_clusters_know_and_that_belong_to_the_topic_are_set() -> None:
    source = {"retention.ms": "1", "cleanup.policy": "compact", "min.insync.replicas": "2", "only.there": "x",
              "segment.bytes": "5"}
    target = {"retention.ms": "2", "cleanup.policy": "delete", "min.insync.replicas": "1", "segment.bytes": "5"}
    assert config_changes(source, target) == {"retention.ms": "1", "cleanup.policy": "compact"}
