"""The Broker facade in-process: it provides IBroker, auto-creates topics, administers them through the cluster view."""

from __future__ import annotations

from pathlib import Path

import pytest
from zope.interface import implementer
from zope.interface.verify import verifyObject

from mqbroker import errors
from mqbroker.cluster.metadata_records import (
    CreateTopic,
    ReassignPartition,
    RegisterBroker,
)
from mqbroker.core.topic_config import PRODUCER_ID_BLOCK_SIZE
from mqbroker.interfaces import IAuthorizer, IBroker, IClusterView, IGenericRecords
from mqbroker.model import (
    ANONYMOUS,
    Acks,
    FetchPosition,
    FetchRequest,
    Operation,
    Principal,
    ResourceType,
    TopicSpec,
)
from tests.fakes import FakeClusterView, build_broker, fired
from tests.unit.storage.logtools import make_batch

BATCH = make_batch([b"a"])
FRONT_END = Principal("Service", "mqtt")
ALICE = Principal("User", "alice")


@implementer(IAuthorizer)
class DenyTopic:
    """Allows everything except any operation on one topic."""

    def __init__(self, topic: str) -> None:
        self.topic = topic

    def authorize(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return not (resource_type is ResourceType.TOPIC and name == self.topic)


def test_the_broker_and_the_fake_cluster_provide_their_interfaces(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView())
    assert verifyObject(IBroker, rig.broker)
    assert verifyObject(IClusterView, rig.cluster)
    assert verifyObject(IGenericRecords, rig.cluster)


def test_producing_to_a_missing_topic_creates_it_with_the_defaults(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView(), settings={"default_partitions": 2})
    assert fired(rig.broker.produce(ANONYMOUS, "new", 1, BATCH, Acks.NONE, 1_000)).base_offset == 0
    assert len(rig.cluster.partition("new", 1).replicas) == 1
    assert sorted(rig.logs.partitions()) == [("new", 0), ("new", 1)]


def test_without_auto_creation_a_missing_topic_is_unknown(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView(), settings={"auto_create_topics": False})
    with pytest.raises(errors.UnknownTopicOrPartitionError, match="mqbroker topics create new"):
        fired(rig.broker.produce(ANONYMOUS, "new", 0, BATCH, Acks.NONE, 1_000))
    assert rig.cluster.proposed == []


def test_an_unauthorized_producer_creates_nothing_and_is_refused(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView(), authorizer=DenyTopic("secret"))
    with pytest.raises(errors.TopicAuthorizationError):
        fired(rig.broker.produce(ANONYMOUS, "secret", 0, BATCH, Acks.NONE, 1_000))
    assert rig.cluster.topic("secret") is None


def test_metadata_describes_brokers_topics_and_per_topic_errors(tmp_path: Path) -> None:
    cluster = FakeClusterView(broker_ids=(1, 2), controller_id=2)
    rig = build_broker(tmp_path, cluster, authorizer=DenyTopic("secret"))
    cluster.apply(CreateTopic(name="t", assignment=(2,), replicas=((2, 1),)))
    described = fired(rig.broker.metadata(ANONYMOUS, ["t", "secret", "bad/name"], True))
    assert described.controller_id == 2 and [b.node_id for b in described.brokers] == [1, 2]
    topic, secret, bad = described.topics
    assert (topic.partitions[0].leader_id, topic.partitions[0].replicas) == (2, (2, 1))
    assert isinstance(secret.error, errors.TopicAuthorizationError)
    assert isinstance(bad.error, errors.InvalidTopicError)


def test_create_topic_validates_then_proposes(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView(broker_ids=(1, 2)))
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="t", partitions=3, replication_factor=2), True))
    assert rig.cluster.proposed == []  # validate_only
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="t", partitions=3, replication_factor=2), False))
    assert [len(p.replicas) for p in rig.cluster.image.topics["t"].partitions] == [2, 2, 2]
    with pytest.raises(errors.TopicAlreadyExistsError):
        fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="t"), False))
    with pytest.raises(errors.InvalidReplicationFactorError, match="2 are live"):
        fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="u", replication_factor=3), False))
    with pytest.raises(errors.InvalidConfigError):
        fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="u", configs={"segment.bytes": "-1"}), False))


def test_topics_without_a_factor_get_three_replicas_and_min_insync_two_in_a_cluster_and_one_on_a_single_broker(
    tmp_path: Path,
) -> None:
    cluster = build_broker(tmp_path / "cluster", FakeClusterView(broker_ids=(1, 2, 3)))
    fired(cluster.broker.create_topic(ANONYMOUS, TopicSpec(name="t"), False))
    fired(cluster.broker.create_topic(Principal("Service", "mqtt"), TopicSpec(name="mqtt.messages"), False))
    fired(cluster.broker.create_topic(ANONYMOUS, TopicSpec(name="one", replication_factor=1), False))
    for name in ("t", "mqtt.messages"):
        assert [len(p.replicas) for p in cluster.cluster.image.topics[name].partitions] == [3]
        assert cluster.cluster.topic(name).configs == {"min.insync.replicas": "2"}
    assert cluster.cluster.topic("one").configs == {}
    single = build_broker(tmp_path / "single", FakeClusterView())
    fired(single.broker.create_topic(ANONYMOUS, TopicSpec(name="t"), False))
    assert [len(p.replicas) for p in single.cluster.image.topics["t"].partitions] == [1]
    assert single.cluster.topic("t").configs == {}


def test_an_explicit_default_replication_factor_applies_to_clients_but_not_to_front_ends(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView(broker_ids=(1, 2, 3)), settings={"default_replication_factor": 1})
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="t"), False))
    fired(rig.broker.create_topic(Principal("Service", "amqp"), TopicSpec(name="amqp.queue.q"), False))
    assert [len(p.replicas) for p in rig.cluster.image.topics["t"].partitions] == [1]
    assert [len(p.replicas) for p in rig.cluster.image.topics["amqp.queue.q"].partitions] == [3]


def test_configs_are_altered_incrementally_and_described_with_the_broker_defaults(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView(), settings={"log.min.insync.replicas": "1"})
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="t", configs={"retention.ms": "1000"}), False))
    fired(rig.broker.alter_configs(ANONYMOUS, "t", {"cleanup.policy": "compact"}, ["retention.ms"]))
    assert rig.cluster.topic("t").configs == {"cleanup.policy": "compact"}
    described = fired(rig.broker.describe_configs(ANONYMOUS, "t"))
    assert described["cleanup.policy"] == "compact" and described["min.insync.replicas"] == "1"
    with pytest.raises(errors.InvalidConfigError):
        fired(rig.broker.alter_configs(ANONYMOUS, "t", {"min.insync.replicas": "zero"}, []))


def test_partitions_only_grow_and_delete_records_stops_at_the_high_watermark(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView())
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="t", partitions=1), False))
    fired(rig.broker.create_partitions(ANONYMOUS, "t", 2))
    assert ("t", 1) in rig.logs.partitions()
    with pytest.raises(errors.InvalidPartitionsError):
        fired(rig.broker.create_partitions(ANONYMOUS, "t", 2))
    produced = rig.broker.produce(ANONYMOUS, "t", 0, make_batch([b"a", b"b"]), Acks.LEADER, 1_000)
    rig.engine.finish_round()
    fired(produced)
    with pytest.raises(errors.OffsetOutOfRangeError):
        fired(rig.broker.delete_records(ANONYMOUS, "t", 0, 3))
    assert fired(rig.broker.delete_records(ANONYMOUS, "t", 0, -1)) == 2


def test_deleting_a_topic_deletes_its_local_logs(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView())
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="t", partitions=2), False))
    fired(rig.broker.delete_topic(ANONYMOUS, "t"))
    assert rig.logs.partitions() == [] and rig.cluster.topic("t") is None
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        fired(rig.broker.delete_topic(ANONYMOUS, "t"))


def test_an_internal_topic_waits_until_enough_brokers_are_live(tmp_path: Path) -> None:
    cluster = FakeClusterView(broker_ids=(1,))
    cluster.voters = {1: ("h", 1), 2: ("h", 2)}  # a quorum of two, the second broker not registered yet
    rig = build_broker(tmp_path, cluster, settings={"offsets_topic_replication_factor": 2})
    created = rig.broker.create_topic(FRONT_END, TopicSpec(name="__state"), False)
    assert not created.called
    cluster.apply(RegisterBroker(node_id=2, host="h", port=2))
    fired(created)
    assert rig.cluster.partition("__state").replicas in ([1, 2], [2, 1])
    assert rig.cluster.topic("__state").configs == {}


def test_producer_ids_come_from_blocks_reserved_through_the_controller(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView())
    first = fired(rig.broker.init_producer_id(ANONYMOUS, None))
    second = fired(rig.broker.init_producer_id(ANONYMOUS, None))
    assert (first.producer_id, second.producer_id, second.producer_epoch) == (0, 1, 0)
    assert rig.cluster.image.next_producer_id == PRODUCER_ID_BLOCK_SIZE  # one block for both


def test_reassignments_are_listed_while_they_run(tmp_path: Path) -> None:
    cluster = FakeClusterView(broker_ids=(1, 2, 3))
    rig = build_broker(tmp_path, cluster)
    cluster.apply(CreateTopic(name="t", assignment=(1,), replicas=((1, 2),)))
    fired(rig.broker.reassign_partition(ANONYMOUS, "t", 0, [2, 3]))
    assert cluster.proposed == [ReassignPartition(topic="t", partition=0, target_replicas=(2, 3))]
    [running] = fired(rig.broker.list_reassignments(ANONYMOUS, None))
    assert (running.adding_replicas, running.removing_replicas) == ((3,), (1,))
    assert fired(rig.broker.list_reassignments(ANONYMOUS, ["other"])) == []


def test_describe_quorum_is_the_cluster_views(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView(broker_ids=(1, 2), controller_id=2))
    assert fired(rig.broker.describe_quorum(ANONYMOUS))["leader"] == 2


def test_metrics_count_what_was_produced_and_fetched(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView(), settings={"log.flush.policy": "interval"})
    fired(rig.broker.produce(ANONYMOUS, "t", 0, make_batch([b"a", b"b"]), Acks.LEADER, 1_000))
    position = FetchPosition(topic="t", partition=0, offset=0, max_bytes=1 << 20)
    fired(rig.broker.fetch(ANONYMOUS, FetchRequest(positions=(position,))))
    assert (rig.broker.stats.produced_records, rig.broker.stats.produced_bytes) == (2, len(make_batch([b"a", b"b"])))
    assert rig.broker.stats.fetched_bytes == rig.broker.stats.produced_bytes and rig.broker.stats.partition_count() == 1


def test_clients_neither_create_nor_produce_to_internal_topics(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView())
    for principal in (ANONYMOUS, ALICE):
        with pytest.raises(errors.InvalidTopicError, match="'__mqtt_sessions' is internal"):
            fired(rig.broker.produce(principal, "__mqtt_sessions", 0, BATCH, Acks.LEADER, 1_000))
        with pytest.raises(errors.InvalidTopicError):
            fired(rig.broker.create_topic(principal, TopicSpec(name="__mqtt_sessions"), False))
        [described] = fired(rig.broker.metadata(principal, ["__mqtt_sessions"], True)).topics
        assert isinstance(described.error, errors.UnknownTopicOrPartitionError)
    assert rig.cluster.proposed == []  # nothing was auto-created on the way
    produced = rig.broker.produce(FRONT_END, "__mqtt_sessions", 0, BATCH, Acks.LEADER, 1_000)  # the front end's own write
    rig.engine.finish_round()
    assert fired(produced).base_offset == 0
    with pytest.raises(errors.InvalidTopicError):
        fired(rig.broker.produce(ANONYMOUS, "__mqtt_sessions", 0, BATCH, Acks.LEADER, 1_000))  # existing or not


def test_only_a_super_user_deletes_or_changes_an_internal_topic_but_its_replicas_move_as_any_topics(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView(), settings={"security.super_users": "User:admin"})
    fired(rig.broker.create_topic(FRONT_END, TopicSpec(name="__amqp_metadata"), False))
    refused = [
        lambda: rig.broker.delete_topic(ALICE, "__amqp_metadata"),
        lambda: rig.broker.alter_configs(ALICE, "__amqp_metadata", {"retention.ms": "1"}, []),
        lambda: rig.broker.create_partitions(ALICE, "__amqp_metadata", 4),
        lambda: rig.broker.delete_records(ALICE, "__amqp_metadata", 0, -1),
    ]
    for call in refused:
        with pytest.raises(errors.TopicAuthorizationError, match="only a super user"):
            fired(call())
    assert len(rig.cluster.topic("__amqp_metadata").partitions) == 1 and rig.cluster.topic("__amqp_metadata").configs == {}
    # Moving replicas keeps every record: the authorizer decides, as for any topic (allow-all here).
    fired(rig.broker.reassign_partition(ALICE, "__amqp_metadata", 0, [1]))
    fired(rig.broker.delete_topic(Principal("User", "admin"), "__amqp_metadata"))
    assert rig.cluster.topic("__amqp_metadata") is None


def test_the_cluster_partition_limit_refuses_new_partitions_by_name(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView(), settings={"cluster_partitions_max": 5})
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="t", partitions=3), False))
    with pytest.raises(errors.PolicyViolationError, match=r"holds 3 partitions; 3 more .* limit of 5 \(setting "
                                                          r"cluster_partitions_max\)"):
        fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="u", partitions=3), False))
    fired(rig.broker.create_partitions(ANONYMOUS, "t", 5))
    with pytest.raises(errors.PolicyViolationError):
        fired(rig.broker.create_partitions(ANONYMOUS, "t", 6))
    with pytest.raises(errors.PolicyViolationError):
        fired(rig.broker.produce(ANONYMOUS, "auto", 0, BATCH, Acks.LEADER, 1_000))  # auto-creation counts too
    assert sorted(rig.cluster.image.topics) == ["t"]
    fired(rig.broker.create_topic(FRONT_END, TopicSpec(name="__mqtt_retained"), False))  # the broker's own


@implementer(IAuthorizer)
class DenyClusterAlterConfigs:
    """Allows everything except ALTER_CONFIGS on the cluster."""

    def authorize(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return not (resource_type is ResourceType.CLUSTER and operation is Operation.ALTER_CONFIGS)


def test_dynamic_broker_configs_need_alter_configs_on_the_cluster_and_validate_only_proposes_nothing(
    tmp_path: Path,
) -> None:
    denied = build_broker(tmp_path / "denied", FakeClusterView(), authorizer=DenyClusterAlterConfigs())
    with pytest.raises(errors.ClusterAuthorizationError):
        fired(denied.broker.alter_broker_configs(ALICE, None, {"retention.ms": "100"}, []))
    rig = build_broker(tmp_path / "allowed", FakeClusterView())
    fired(rig.broker.alter_broker_configs(ALICE, None, {"retention.ms": "100"}, [], validate_only=True))
    with pytest.raises(errors.InvalidRequestError, match="min.insync.replicas"):  # a bad value, as Kafka answers it
        fired(rig.broker.alter_broker_configs(ALICE, None, {"min.insync.replicas": "zero"}, []))
    with pytest.raises(errors.InvalidConfigError, match="cluster-wide"):
        fired(rig.broker.alter_broker_configs(ALICE, 1, {"min.insync.replicas": "2"}, []))
    assert denied.cluster.proposed == rig.cluster.proposed == []
    fired(rig.broker.alter_broker_configs(ALICE, 1, {"retention.ms": "100", "segment.bytes": "2000000"}, []))
    fired(rig.broker.alter_broker_configs(ALICE, 1, {}, ["segment.bytes"]))
    assert rig.cluster.image.broker_configs == {"1": {"retention.ms": "100"}}


def test_topics_take_dynamic_defaults_and_the_leader_enforces_min_insync_replicas_from_them(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView(), settings={"log.retention.ms": "500"})
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="t", replication_factor=1), False))
    assert fired(rig.broker.describe_configs(ANONYMOUS, "t"))["retention.ms"] == "500"
    fired(rig.broker.alter_broker_configs(ANONYMOUS, None, {"min.insync.replicas": "2", "retention.ms": "200"}, []))
    effective = fired(rig.broker.describe_configs(ANONYMOUS, "t"))
    assert (effective["min.insync.replicas"], effective["retention.ms"]) == ("2", "200")
    assert rig.logs.get("t", 0).config.retention_ms == 200  # the local log is reconfigured
    with pytest.raises(errors.NotEnoughReplicasError):
        fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.ALL, 1_000))
