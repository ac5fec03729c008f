"""The client's cluster view: leaders and partition counts from Metadata, stale topics marked."""

from mqbroker.client.cluster import NO_LEADER, ClusterView
from mqbroker.errors import ErrorCode, UnknownTopicOrPartitionError
from mqbroker.protocols.native.messages import MetadataBroker, MetadataPartition, MetadataResponse, MetadataTopic


def _metadata(*topics: MetadataTopic) -> MetadataResponse:
    brokers = (MetadataBroker(node_id=1, host="h1", port=9393), MetadataBroker(node_id=2, host="h2", port=9393))
    return MetadataResponse(brokers=brokers, cluster_id="c", controller_id=1, topics=topics)


def _partition(number: int, leader: int) -> MetadataPartition:
    return MetadataPartition(
        partition_index=number, leader_id=leader, leader_epoch=0, replica_nodes=(leader,), isr_nodes=(leader,)
    )


def test_metadata_reply_gives_leaders_counts_and_addresses() -> None:
    view = ClusterView()
    view.invalidate("events")
    topic = MetadataTopic(name="events", partitions=(_partition(0, 1), _partition(1, 2)))
    view.update(_metadata(topic), now_ms=5)
    assert view.partition_count("events") == 2
    assert (view.leader("events", 0), view.leader("events", 1)) == (1, 2)
    assert view.address(2) == ("h2", 9393)
    assert view.stale_topics == set()
    assert view.leader("events", 7) == NO_LEADER


def test_topic_error_forgets_the_topic_and_is_kept_for_callers() -> None:
    view = ClusterView()
    view.update(_metadata(MetadataTopic(name="events", partitions=(_partition(0, 1),))), now_ms=1)
    missing = MetadataTopic(
        name="events", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message="no such topic", partitions=()
    )
    view.update(_metadata(missing), now_ms=2)
    assert view.partition_count("events") is None
    assert view.leader("events", 0) == NO_LEADER
    assert isinstance(view.topic_error("events"), UnknownTopicOrPartitionError)
