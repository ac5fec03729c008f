"""Produce in-process: acks 0, 1 and all against real partition logs, a fake cluster and a Clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbroker import errors
from mqbroker.core import produce as produce_module
from mqbroker.cluster.metadata_records import AlterBrokerConfigs, AlterPartition, AlterTopicConfigs, CreateTopic, ElectLeader
from mqbroker.model import ANONYMOUS, Acks, FetchPosition, FetchRequest, Principal
from mqbroker.security.inter_broker import broker_principal
from tests.fakes import BrokerRig, FakeClusterView, build_broker, fired
from tests.poison import poison_batch
from tests.unit.storage.logtools import make_batch

BATCH = make_batch([b"a", b"b", b"c"])


def _single(tmp_path: Path, configs: dict[str, str] | None = None) -> BrokerRig:
    cluster = FakeClusterView(broker_ids=(1,))
    rig = build_broker(tmp_path, cluster)
    cluster.apply(CreateTopic(name="t", assignment=(1,), configs=configs or {}, replicas=((1,),)))
    return rig


def _leader_of_three(tmp_path: Path, configs: dict[str, str] | None = None) -> BrokerRig:
    """Broker 1 leads t-0, replicated on brokers 1, 2 and 3 (the followers are only names in the image)."""
    cluster = FakeClusterView(broker_ids=(1, 2, 3))
    rig = build_broker(tmp_path, cluster)
    cluster.apply(CreateTopic(name="t", assignment=(1,), configs=configs or {}, replicas=((1, 2, 3),)))
    return rig


def _follower_fetched(rig: BrokerRig, replica_id: int, offset: int) -> None:
    """Follower ``replica_id`` fetches from ``offset``: it holds everything below."""
    state = rig.cluster.partition("t")
    position = FetchPosition(topic="t", partition=0, offset=offset, max_bytes=1 << 20,
                             current_leader_epoch=state.leader_epoch, last_fetched_epoch=state.leader_epoch)
    fired(rig.broker.replica_fetch(broker_principal(replica_id), replica_id, FetchRequest(positions=(position,))))


def _shrink_isr(rig: BrokerRig, isr: tuple[int, ...]) -> None:
    state = rig.cluster.partition("t")
    rig.cluster.apply(AlterPartition(topic="t", partition=0, leader_id=state.leader_id, leader_epoch=state.leader_epoch,
                                     partition_epoch=state.partition_epoch, isr=isr))


def test_acks_0_answers_before_the_batch_is_durable(tmp_path: Path) -> None:
    rig = _single(tmp_path)
    result = fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))
    assert (result.base_offset, result.last_offset) == (0, 2)
    assert rig.log("t").durable_end_offset == 0 and len(rig.engine.rounds) == 1  # the fsync is only scheduled


def test_acks_1_answers_once_the_fsync_round_made_the_batch_durable(tmp_path: Path) -> None:
    rig = _single(tmp_path)
    produced = rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.LEADER, 1_000)
    assert not produced.called
    rig.engine.finish_round()
    assert fired(produced).last_offset == 2 and rig.log("t").durable_end_offset == 3


def test_acks_1_under_interval_flushing_answers_at_once(tmp_path: Path) -> None:
    rig = _single(tmp_path, {"flush.policy": "interval"})
    assert fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.LEADER, 1_000)).last_offset == 2
    assert rig.engine.rounds == []


def test_acks_all_waits_for_every_in_sync_replica(tmp_path: Path) -> None:
    rig = _leader_of_three(tmp_path)
    produced = rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.ALL, 10_000)
    rig.engine.finish_round()
    _follower_fetched(rig, 2, 3)
    assert not produced.called  # broker 3 has not fetched the batch yet
    _follower_fetched(rig, 3, 3)
    assert fired(produced).last_offset == 2


def test_acks_all_counts_only_the_leaders_durable_end(tmp_path: Path) -> None:
    rig = _leader_of_three(tmp_path)
    produced = rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.ALL, 10_000)
    _follower_fetched(rig, 2, 3)
    _follower_fetched(rig, 3, 3)
    assert not produced.called  # the followers have it, the leader's own disk not yet
    rig.engine.finish_round()
    assert fired(produced).last_offset == 2


def test_acks_all_is_refused_below_min_insync_replicas_and_nothing_is_written(tmp_path: Path) -> None:
    rig = _leader_of_three(tmp_path, {"min.insync.replicas": "2"})
    _shrink_isr(rig, (1,))
    with pytest.raises(errors.NotEnoughReplicasError, match="min.insync.replicas=2"):
        fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.ALL, 1_000))
    assert rig.log("t").log_end_offset == 0
    acks_none = fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))
    assert acks_none.base_offset == 0  # acks=0 is not refused


def test_min_insync_replicas_changed_after_a_produce_holds_for_the_next_one(tmp_path: Path) -> None:
    rig = _leader_of_three(tmp_path)
    _shrink_isr(rig, (1,))
    assert fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000)).base_offset == 0
    rig.cluster.apply(AlterBrokerConfigs(entity="1", configs={"min.insync.replicas": "2"}))
    with pytest.raises(errors.NotEnoughReplicasError, match="min.insync.replicas=2"):
        fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.ALL, 1_000))
    rig.cluster.apply(AlterTopicConfigs(name="t", configs={"min.insync.replicas": "1"}))  # the topic's own wins
    produced = rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.ALL, 1_000)
    rig.engine.finish_round()
    assert fired(produced).base_offset == 3


def test_acks_all_fails_after_the_append_when_the_isr_shrank_below_the_minimum(tmp_path: Path) -> None:
    rig = _leader_of_three(tmp_path, {"min.insync.replicas": "2"})
    produced = rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.ALL, 10_000)
    rig.engine.finish_round()
    _shrink_isr(rig, (1,))  # the followers fell out: the high watermark is the leader's alone
    with pytest.raises(errors.NotEnoughReplicasAfterAppendError):
        fired(produced)


def test_acks_all_times_out_when_the_followers_do_not_catch_up(tmp_path: Path) -> None:
    rig = _leader_of_three(tmp_path)
    produced = rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.ALL, 2_000)
    rig.engine.finish_round()
    rig.clock.advance(1.9)
    assert not produced.called
    rig.clock.advance(0.2)
    with pytest.raises(errors.RequestTimedOutError, match="did not confirm offset 2"):
        fired(produced)


def test_a_waiting_acks_all_produce_fails_when_the_leadership_moves(tmp_path: Path) -> None:
    rig = _leader_of_three(tmp_path)
    produced = rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.ALL, 10_000)
    rig.cluster.apply(ElectLeader(topic="t", partition=0, leader_id=2, leader_epoch=0))
    with pytest.raises(errors.NotLeaderError, match="leadership moved"):
        fired(produced)
    assert rig.follower.following == {("t", 0): (2, 1)}


def test_a_partition_led_elsewhere_answers_not_leader(tmp_path: Path) -> None:
    cluster = FakeClusterView(broker_ids=(1, 2))
    rig = build_broker(tmp_path, cluster)
    cluster.apply(CreateTopic(name="t", assignment=(2,), replicas=((2, 1),)))
    with pytest.raises(errors.NotLeaderError, match="led by broker 2"):
        fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.LEADER, 1_000))


def test_a_corrupt_batch_is_a_typed_error_and_the_broker_goes_on(tmp_path: Path) -> None:
    rig = _single(tmp_path)
    corrupt = bytearray(BATCH)
    corrupt[-1] ^= 0xFF
    with pytest.raises(errors.CorruptMessageError):
        fired(rig.broker.produce(ANONYMOUS, "t", 0, bytes(corrupt), Acks.LEADER, 1_000))
    assert fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000)).base_offset == 0


def test_a_stopping_broker_refuses_produces_and_drains_its_last_fsync_round(tmp_path: Path) -> None:
    rig = _single(tmp_path)
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))
    stopped = rig.broker.stop()
    with pytest.raises(errors.BrokerShuttingDownError):
        fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))
    assert not stopped.called
    rig.engine.finish_all()
    fired(stopped)
    assert rig.log("t").durable_end_offset == 3


def test_a_compacted_topic_refuses_a_clients_record_without_a_key(tmp_path: Path) -> None:
    rig = _single(tmp_path, {"cleanup.policy": "compact"})
    with pytest.raises(errors.InvalidRecordError, match="compacted: every record needs a key"):
        fired(rig.broker.produce(ANONYMOUS, "t", 0, make_batch([b"a"], keys=[None]), Acks.NONE, 1_000))
    with pytest.raises(errors.CorruptMessageError, match="only records that decode"):
        fired(rig.broker.produce(ANONYMOUS, "t", 0, poison_batch(), Acks.NONE, 1_000))
    assert rig.log("t").log_end_offset == 0
    assert fired(rig.broker.produce(ANONYMOUS, "t", 0, make_batch([b"a"], keys=[b"k"]), Acks.NONE, 1_000)).base_offset == 0


def test_a_topic_the_broker_decodes_refuses_records_that_do_not_decode(tmp_path: Path) -> None:
    rig = _single(tmp_path, {"record.validation": "decode"})
    with pytest.raises(errors.CorruptMessageError, match="'t' takes only records that decode"):
        fired(rig.broker.produce(Principal("User", "alice"), "t", 0, poison_batch(), Acks.NONE, 1_000))
    assert rig.log("t").log_end_offset == 0
    assert fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000)).base_offset == 0
    assert fired(rig.broker.produce(Principal("Service", "mqtt"), "t", 0, BATCH, Acks.NONE, 1_000)).base_offset == 3


def test_record_validation_set_after_a_produce_holds_for_the_next_one(tmp_path: Path) -> None:
    rig = _single(tmp_path)
    assert fired(rig.broker.produce(ANONYMOUS, "t", 0, poison_batch(), Acks.NONE, 1_000)).base_offset == 0
    rig.cluster.apply(AlterBrokerConfigs(entity="", configs={"record.validation": "decode"}))
    with pytest.raises(errors.CorruptMessageError, match="'t' takes only records that decode"):
        fired(rig.broker.produce(ANONYMOUS, "t", 0, poison_batch(), Acks.NONE, 1_000))


def test_batches_a_front_end_built_are_not_decoded_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An MQTT or AMQP front end builds its batches from fields it decoded: no second decode per record."""
    rig = _single(tmp_path, {"record.validation": "decode"})
    decoded: list[str] = []
    original = produce_module.check_produced_records
    monkeypatch.setattr(produce_module, "check_produced_records",
                        lambda topic, records, **options: decoded.append(topic) or original(topic, records, **options))
    alice = Principal("User", "alice")
    assert fired(rig.broker.produce(alice, "t", 0, BATCH, Acks.NONE, 1_000, front_end_batches=True)).base_offset == 0
    assert decoded == []
    fired(rig.broker.produce(alice, "t", 0, BATCH, Acks.NONE, 1_000))  # a client's bytes: decoded
    assert decoded == ["t"]


def test_other_topics_take_batches_without_decoding_their_records(tmp_path: Path) -> None:
    """No per-record work on the produce path: a CRC-valid batch of garbage records is appended (readers skip it)."""
    rig = _single(tmp_path)
    assert fired(rig.broker.produce(ANONYMOUS, "t", 0, poison_batch(), Acks.NONE, 1_000)).base_offset == 0
