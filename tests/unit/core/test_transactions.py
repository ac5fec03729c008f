"""Transactions through the core in-process: a single broker coordinates, verifies, marks and filters."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from mqbroker import errors
from mqbroker.groups.coordinator import MemberIdGenerator
from mqbroker.groups.messages import OffsetCommitRequest, PartitionCommit
from mqbroker.groups.service import OFFSETS_TOPIC, offsets_partition
from mqbroker.groups.model import TopicPartition
from mqbroker.model import ANONYMOUS, Acks, FetchPosition, FetchRequest, IsolationLevel, ProducerIdentity, TopicSpec
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.decoder import decode_records
from mqbroker.records.isolation import committed_batches
from mqbroker.transactions import messages as txn
from mqbroker.transactions.log_records import TRANSACTION_STATE_TOPIC
from tests.fakes import BrokerRig, FakeClusterView, build_broker, fired

SETTINGS = {"offsets_topic_partitions": 2, "transaction_state_partitions": 2, "group_initial_rebalance_delay_ms": 0}
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _started(tmp_path: Path) -> BrokerRig:
    rig = build_broker(tmp_path, FakeClusterView(), settings=SETTINGS)
    fired(rig.broker.start_groups(MemberIdGenerator(random.Random(7))))
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="t", partitions=2), False))
    return rig


def _settled(rig: BrokerRig, deferred: Deferred[Any]) -> Any:
    """Run fsync rounds and the clock until ``deferred`` fires; its result (or its error raised)."""
    outcome: list[Any] = []
    deferred.addBoth(outcome.append)
    for _ in range(200):
        if outcome:
            break
        rig.engine.finish_all()
        rig.clock.advance(0.01)
    assert outcome, "the call never answered"
    if isinstance(outcome[0], Failure):
        outcome[0].raiseException()
    return outcome[0]


def _quiet(rig: BrokerRig) -> None:
    """Let markers and state writes finish."""
    for _ in range(50):
        rig.engine.finish_all()
        rig.clock.advance(0.05)


def _batch(identity: ProducerIdentity, sequence: int, *values: bytes) -> bytes:
    builder = BatchBuilder(producer_id=identity.producer_id, producer_epoch=identity.producer_epoch,
                           base_sequence=sequence, is_transactional=True)
    for value in values:
        builder.append(1_000, None, value)
    return builder.build()


def _produce(rig: BrokerRig, topic_partition: TopicPartition, batch: bytes, transactional_id: str = "tx") -> Any:
    return _settled(rig, rig.broker.produce(ANONYMOUS, topic_partition.topic, topic_partition.partition, batch, Acks.ALL,
                                            5_000, transactional_id))


def _request(topic_partition: TopicPartition, isolation: IsolationLevel) -> FetchRequest:
    position = FetchPosition(topic=topic_partition.topic, partition=topic_partition.partition, offset=0,
                             max_bytes=1 << 20)
    return FetchRequest(positions=(position,), isolation_level=isolation)


def _read(rig: BrokerRig, topic_partition: TopicPartition, isolation: IsolationLevel) -> list[bytes]:
    """The values an application sees at ``isolation`` (markers and aborted batches dropped)."""
    (result,) = fired(rig.broker.fetch(ANONYMOUS, _request(topic_partition, isolation)))
    assert result.error is None
    aborted = None if result.aborted_transactions is None else [tuple(a) for a in result.aborted_transactions]
    values = []
    for position, header in committed_batches(result.records, aborted):
        values += [record.value for record in decode_records(result.records[position : position + header.size_bytes])]
    return values


def _begin(rig: BrokerRig, transactional_id: str = "tx") -> ProducerIdentity:
    return _settled(rig, rig.broker.init_producer_id(ANONYMOUS, transactional_id, 10_000))


def _add(rig: BrokerRig, identity: ProducerIdentity, *partitions: TopicPartition) -> None:
    _settled(rig, rig.broker.add_partitions_to_txn(ANONYMOUS, txn.AddPartitionsRequest(
        transactional_id="tx", producer_id=identity.producer_id, producer_epoch=identity.producer_epoch,
        partitions=frozenset(partitions))))


def _end(rig: BrokerRig, identity: ProducerIdentity, committed: bool) -> None:
    _settled(rig, rig.broker.end_txn(ANONYMOUS, txn.EndTxnRequest(
        transactional_id="tx", producer_id=identity.producer_id, producer_epoch=identity.producer_epoch,
        committed=committed)))
    _quiet(rig)


def test_a_transactional_id_is_coordinated_by_the_leader_of_its_state_partition(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    assert rig.cluster.topic(TRANSACTION_STATE_TOPIC).configs["cleanup.policy"] == "compact"
    assert fired(rig.broker.find_transaction_coordinator(ANONYMOUS, "tx")).node_id == 1
    first = _begin(rig)
    second = _begin(rig)
    assert second.producer_id == first.producer_id and second.producer_epoch == first.producer_epoch + 1


def test_a_committed_transaction_becomes_visible_to_read_committed_at_once_on_every_partition(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    identity = _begin(rig)
    _add(rig, identity, T0, T1)
    _produce(rig, T0, _batch(identity, 0, b"a0", b"a1"))
    _produce(rig, T1, _batch(identity, 0, b"b0"))
    assert _read(rig, T0, IsolationLevel.READ_UNCOMMITTED) == [b"a0", b"a1"]
    assert _read(rig, T0, IsolationLevel.READ_COMMITTED) == [] and _read(rig, T1, IsolationLevel.READ_COMMITTED) == []
    _end(rig, identity, committed=True)
    assert _read(rig, T0, IsolationLevel.READ_COMMITTED) == [b"a0", b"a1"]
    assert _read(rig, T1, IsolationLevel.READ_COMMITTED) == [b"b0"]
    assert fired(rig.broker.list_offset(ANONYMOUS, "t", 0, -1, IsolationLevel.READ_COMMITTED)).offset == 3  # + marker


def test_an_aborted_transaction_is_listed_to_read_committed_readers_who_drop_it(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    identity = _begin(rig)
    _add(rig, identity, T0)
    _produce(rig, T0, _batch(identity, 0, b"gone"))
    _end(rig, identity, committed=False)
    _add(rig, identity, T0)
    _produce(rig, T0, _batch(identity, 1, b"kept"))
    _end(rig, identity, committed=True)
    (result,) = fired(rig.broker.fetch(ANONYMOUS, _request(T0, IsolationLevel.READ_COMMITTED)))
    assert [tuple(a) for a in result.aborted_transactions] == [(identity.producer_id, 0)]
    assert _read(rig, T0, IsolationLevel.READ_COMMITTED) == [b"kept"]
    assert _read(rig, T0, IsolationLevel.READ_UNCOMMITTED) == [b"gone", b"kept"]


def test_a_partition_not_added_to_the_transaction_refuses_its_batches(tmp_path: Path) -> None:
    """KIP-890 part 1: no late or stray write can open a hanging transaction."""
    rig = _started(tmp_path)
    identity = _begin(rig)
    _add(rig, identity, T0)
    with pytest.raises(errors.InvalidTxnStateError):
        _produce(rig, T1, _batch(identity, 0, b"stray"))
    assert _read(rig, T1, IsolationLevel.READ_UNCOMMITTED) == []
    with pytest.raises(errors.InvalidRecordError, match="transactional id"):
        _produce(rig, T0, _batch(identity, 0, b"x"), transactional_id=None)


def test_a_new_incarnation_aborts_the_old_open_transaction_and_fences_its_producer(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    zombie = _begin(rig)
    _add(rig, zombie, T0)
    _produce(rig, T0, _batch(zombie, 0, b"zombie"))
    successor = _begin(rig)
    _quiet(rig)
    assert _read(rig, T0, IsolationLevel.READ_COMMITTED) == []  # the zombie's data is aborted, the LSO moved on
    assert fired(rig.broker.list_offset(ANONYMOUS, "t", 0, -1, IsolationLevel.READ_COMMITTED)).offset == 2
    with pytest.raises((errors.ProducerFencedError, errors.InvalidProducerEpochError)):
        _produce(rig, T0, _batch(zombie, 1, b"late"))
    with pytest.raises((errors.ProducerFencedError, errors.InvalidProducerEpochError)):
        _end(rig, zombie, committed=True)
    _add(rig, successor, T0)
    _produce(rig, T0, _batch(successor, 0, b"fresh"))
    _end(rig, successor, committed=True)
    assert _read(rig, T0, IsolationLevel.READ_COMMITTED) == [b"fresh"]


def test_offsets_committed_in_a_transaction_show_only_once_it_commits(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    offsets = OffsetCommitRequest(group_id="g", offsets=(PartitionCommit(topic_partition=T0, offset=7),))
    for committed, expected in ((False, None), (True, 7)):
        identity = _begin(rig)
        _settled(rig, rig.broker.add_offsets_to_txn(ANONYMOUS, txn.AddOffsetsRequest(
            transactional_id="tx", producer_id=identity.producer_id, producer_epoch=identity.producer_epoch,
            group_id="g")))
        _settled(rig, rig.broker.txn_commit_offsets(ANONYMOUS, txn.TxnOffsetCommitRequest(
            transactional_id="tx", producer_id=identity.producer_id, producer_epoch=identity.producer_epoch,
            offsets=offsets)))
        assert fired(rig.broker.fetch_offsets(ANONYMOUS, "g", [T0]))[T0] is None
        with pytest.raises(errors.UnstableOffsetCommitError):
            fired(rig.broker.fetch_offsets(ANONYMOUS, "g", [T0], True))
        _end(rig, identity, committed=committed)
        found = fired(rig.broker.fetch_offsets(ANONYMOUS, "g", [T0], True))[T0]
        assert (found.offset if found is not None else None) == expected


def test_transactions_are_described_and_listed_at_their_coordinator(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    identity = _begin(rig)
    _add(rig, identity, T0)
    (described,) = fired(rig.broker.describe_transactions(ANONYMOUS, ["tx"]))
    assert described.state is txn.TransactionState.ONGOING and described.partitions == frozenset({T0})
    (listed,) = fired(rig.broker.list_transactions(ANONYMOUS, [], []))
    assert (listed.transactional_id, listed.producer_id) == ("tx", identity.producer_id)
    (unknown,) = fired(rig.broker.describe_transactions(ANONYMOUS, ["nobody"]))
    assert isinstance(unknown, errors.BrokerError)


# -- transaction version 2 (KIP-890 part 2) -------------------------------------------------------


def _produce_adding(rig: BrokerRig, topic_partition: TopicPartition, batch: bytes) -> Deferred[Any]:
    """A version 2 produce: its partition joins the transaction at the leader (no AddPartitionsToTxn)."""
    return rig.broker.produce(ANONYMOUS, topic_partition.topic, topic_partition.partition, batch, Acks.ALL, 5_000,
                              "tx", add_to_transaction=True)


def _end_bumping(identity: ProducerIdentity, committed: bool) -> txn.EndTxnRequest:
    return txn.EndTxnRequest(transactional_id="tx", producer_id=identity.producer_id,
                             producer_epoch=identity.producer_epoch, committed=committed, bump_epoch=True)


def test_version_2_each_decision_bumps_the_epoch_and_the_next_transaction_never_joins_the_last(
        tmp_path: Path) -> None:
    """The next transaction's first batch is sent from inside EndTxn's answer, before the decision's markers are
    written: it waits for them at the coordinator and opens a transaction of its own."""
    rig = _started(tmp_path)
    first = _begin(rig)
    _settled(rig, _produce_adding(rig, T0, _batch(first, 0, b"committed")))
    _settled(rig, _produce_adding(rig, T1, _batch(first, 0, b"committed-1")))
    following: list[Deferred[Any]] = []

    def next_transaction(bumped: txn.ProducerIdAndEpoch) -> txn.ProducerIdAndEpoch:
        identity = ProducerIdentity(producer_id=bumped.producer_id, producer_epoch=bumped.producer_epoch)
        following.append(_produce_adding(rig, T0, _batch(identity, 0, b"aborted")))
        return bumped

    ended = rig.broker.end_txn(ANONYMOUS, _end_bumping(first, committed=True)).addCallback(next_transaction)
    bumped = _settled(rig, ended)
    assert (bumped.producer_id, bumped.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
    _settled(rig, following[0])
    second = ProducerIdentity(producer_id=bumped.producer_id, producer_epoch=bumped.producer_epoch)
    after_abort = _settled(rig, rig.broker.end_txn(ANONYMOUS, _end_bumping(second, committed=False)))
    assert after_abort.producer_epoch == first.producer_epoch + 2
    _quiet(rig)
    assert _read(rig, T0, IsolationLevel.READ_COMMITTED) == [b"committed"]
    assert _read(rig, T1, IsolationLevel.READ_COMMITTED) == [b"committed-1"]
    assert _read(rig, T0, IsolationLevel.READ_UNCOMMITTED) == [b"committed", b"aborted"]
    # A retry of the abort from the previous epoch gets the same answer; the older epochs are fenced.
    assert _settled(rig, rig.broker.end_txn(ANONYMOUS, _end_bumping(second, committed=False))) == after_abort
    with pytest.raises(errors.ProducerFencedError):
        _settled(rig, rig.broker.end_txn(ANONYMOUS, _end_bumping(first, committed=True)))
    with pytest.raises((errors.ProducerFencedError, errors.InvalidProducerEpochError)):
        _settled(rig, _produce_adding(rig, T1, _batch(second, 1, b"late")))


def test_version_2_batches_released_by_one_addition_share_one_fsync_round(tmp_path: Path) -> None:
    """A produce opening the transaction in two partitions: both appends wait for the coordinator's addition,
    then go to disk in one fsync round (not the first alone, the second in the round after)."""
    rig = _started(tmp_path)
    identity = _begin(rig)
    produced = [_produce_adding(rig, T0, _batch(identity, 0, b"a")), _produce_adding(rig, T1, _batch(identity, 0, b"b"))]
    rig.clock.advance(0)  # the additions of this turn go to the coordinator as one
    logs = {topic_partition: rig.logs.get(topic_partition.topic, topic_partition.partition) for topic_partition in (T0, T1)}
    while all(partition_log.log_end_offset == 0 for partition_log in logs.values()):
        rig.engine.finish_round()  # the addition's write, durable
        rig.clock.advance(0.001)
    (round_logs, _), = rig.engine.rounds
    assert set(round_logs) == set(logs.values())
    for answer in produced:
        _settled(rig, answer)


def test_version_2_batches_of_partitions_added_already_share_one_fsync_round(tmp_path: Path) -> None:
    """The producer added its partitions with AddPartitionsToTxn while it wrote; the produce that follows asks the
    leaders to add them again, answered at once: both appends still go to disk in one fsync round."""
    rig = _started(tmp_path)
    identity = _begin(rig)
    _add(rig, identity, T0, T1)
    _quiet(rig)
    produced = [_produce_adding(rig, T0, _batch(identity, 0, b"a")), _produce_adding(rig, T1, _batch(identity, 0, b"b"))]
    rig.clock.advance(0)  # the additions of this turn, answered without a write
    (round_logs, _), = rig.engine.rounds
    assert set(round_logs) == {rig.logs.get("t", 0), rig.logs.get("t", 1)}
    for answer in produced:
        _settled(rig, answer)


def test_version_2_offsets_join_the_transaction_without_add_offsets(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    identity = _begin(rig)
    offsets = OffsetCommitRequest(group_id="g", offsets=(PartitionCommit(topic_partition=T0, offset=9),))
    _settled(rig, rig.broker.txn_commit_offsets(ANONYMOUS, txn.TxnOffsetCommitRequest(
        transactional_id="tx", producer_id=identity.producer_id, producer_epoch=identity.producer_epoch,
        offsets=offsets, add_to_transaction=True)))
    assert fired(rig.broker.fetch_offsets(ANONYMOUS, "g", [T0]))[T0] is None
    _settled(rig, rig.broker.end_txn(ANONYMOUS, _end_bumping(identity, committed=True)))
    _quiet(rig)
    assert fired(rig.broker.fetch_offsets(ANONYMOUS, "g", [T0], True))[T0].offset == 9


def test_offsets_apply_when_the_marker_s_slow_fsync_round_ends_not_a_retry_later(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    identity = _begin(rig)
    _settled(rig, rig.broker.add_offsets_to_txn(ANONYMOUS, txn.AddOffsetsRequest(
        transactional_id="tx", producer_id=identity.producer_id, producer_epoch=identity.producer_epoch,
        group_id="g")))
    offsets = OffsetCommitRequest(group_id="g", offsets=(PartitionCommit(topic_partition=T0, offset=7),))
    _settled(rig, rig.broker.txn_commit_offsets(ANONYMOUS, txn.TxnOffsetCommitRequest(
        transactional_id="tx", producer_id=identity.producer_id, producer_epoch=identity.producer_epoch,
        offsets=offsets)))
    answered: list[Any] = []
    rig.broker.end_txn(ANONYMOUS, txn.EndTxnRequest(
        transactional_id="tx", producer_id=identity.producer_id, producer_epoch=identity.producer_epoch,
        committed=True)).addBoth(answered.append)
    while not answered:  # fsync round by round until the decision is durable
        rig.engine.finish_round()
        rig.clock.advance(0.001)
    assert rig.engine.rounds, "the COMMIT marker waits for its fsync round"
    offsets_log = rig.logs.get(OFFSETS_TOPIC, offsets_partition("g", SETTINGS["offsets_topic_partitions"]))
    marked_end_offset = offsets_log.log_end_offset
    for _ in range(80):  # the round takes 8 s (a loaded disk)
        rig.clock.advance(0.1)
    with pytest.raises(errors.UnstableOffsetCommitError):
        fired(rig.broker.fetch_offsets(ANONYMOUS, "g", [T0], True))
    rig.engine.finish_round()  # the marker is durable now: the group needs nothing more
    rig.clock.advance(0.1)
    assert fired(rig.broker.fetch_offsets(ANONYMOUS, "g", [T0], True))[T0].offset == 7
    _quiet(rig)
    assert offsets_log.log_end_offset == marked_end_offset  # one marker: none appended again behind it
