"""Kafka clients' transactions against mqbroker's Kafka listener: confluent-kafka's transactional producer
(commit, abort, offsets in the transaction, zombie fencing) read by read_committed consumers; Kafka's
``kafka-transactions`` tool; DescribeTransactions and WriteTxnMarkers on the wire."""

from __future__ import annotations


import pytest

from mqbroker.errors import ErrorCode
from mqbroker.protocols.kafka.messages.apis import ApiKey
from mqbroker.protocols.kafka.messages.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsTopic,
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.kafka_support import (
    consume_with_confluent,
    kafka_bootstrap,
    kafka_call,
    kafka_broker_fixture,
    unique,
)


kafka_broker = kafka_broker_fixture("kafka-transactions")


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the topic is created
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def _values(messages: list) -> list[bytes]:  # type: ignore[type-arg]
    return sorted(message.value() for message in messages)


def test_confluent_transactions_commit_and_abort_across_partitions(kafka_broker: BrokerProcess) -> None:
    from confluent_kafka import Producer

    bootstrap, topic = kafka_bootstrap(kafka_broker), unique("txn")
    _create(bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("writer")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for number in range(12):
        producer.produce(topic, value=b"gone-%02d" % number, partition=number % 3)
    producer.flush(10)
    producer.abort_transaction(30)
    producer.begin_transaction()
    for number in range(12):
        producer.produce(topic, value=b"kept-%02d" % number, partition=number % 3)
    producer.commit_transaction(30)
    committed = consume_with_confluent(bootstrap, topic, 12, timeout_s=10.0, **{"isolation.level": "read_committed"})
    assert _values(committed) == sorted(b"kept-%02d" % number for number in range(12))
    everything = consume_with_confluent(bootstrap, topic, 24, timeout_s=10.0,
                                        **{"isolation.level": "read_uncommitted"})
    assert len(everything) == 24


def test_confluent_consume_transform_produce_commits_offsets_with_the_output(kafka_broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap, source, sink, group = kafka_bootstrap(kafka_broker), unique("source"), unique("sink"), unique("etl")
    _create(bootstrap, source, 1)
    _create(bootstrap, sink, 1)
    seeder = Producer({"bootstrap.servers": bootstrap})
    for number in range(20):
        seeder.produce(source, value=b"%02d" % number)
    seeder.flush(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("etl-worker")})
    producer.init_transactions(30)
    seen: list[bytes] = []
    for aborting in (True, False):
        batch = []
        while len(batch) < 10:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                batch.append(message)
        producer.begin_transaction()
        for message in batch:
            producer.produce(sink, value=b"out-" + message.value())
        positions = [TopicPartition(source, 0, batch[-1].offset() + 1)]
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        if aborting:
            producer.abort_transaction(30)
            consumer.seek(TopicPartition(source, 0, batch[0].offset()))  # read the batch again
        else:
            producer.commit_transaction(30)
            seen += [message.value() for message in batch]
    consumer.close()
    assert seen == [b"%02d" % number for number in range(10)]
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    (committed,) = checker.committed([TopicPartition(source, 0)], timeout=10)
    checker.close()
    assert committed.offset == 10  # the aborted transaction's offsets never applied
    output = consume_with_confluent(bootstrap, sink, 10, timeout_s=10.0, **{"isolation.level": "read_committed"})
    assert _values(output) == [b"out-%02d" % number for number in range(10)]


def test_confluent_zombie_is_fenced_by_its_successor(kafka_broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaException, Producer

    bootstrap, topic, transactional_id = kafka_bootstrap(kafka_broker), unique("fenced"), unique("worker")
    _create(bootstrap, topic, 1)
    zombie = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(10)
    successor = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    successor.init_transactions(30)  # aborts the zombie's transaction
    with pytest.raises(KafkaException) as refused:
        zombie.produce(topic, value=b"late")
        zombie.commit_transaction(10)
    assert refused.value.args[0].fatal() or refused.value.args[0].txn_requires_abort()
    successor.begin_transaction()
    successor.produce(topic, value=b"successor")
    successor.commit_transaction(30)
    committed = consume_with_confluent(bootstrap, topic, 1, timeout_s=5.0, **{"isolation.level": "read_committed"})
    assert _values(committed) == [b"successor"]


def test_kafka_transactions_lists_an_open_transaction_then_its_completion(kafka_broker: BrokerProcess) -> None:
    from confluent_kafka import Producer

    from tests.integration.kafka_support import kafka_tool

    bootstrap, topic, transactional_id = kafka_bootstrap(kafka_broker), unique("listed"), unique("listed-writer")
    _create(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open")
    producer.flush(10)

    def listed(*filters: str) -> list[list[str]]:
        result = kafka_tool("kafka-transactions", "--bootstrap-server", bootstrap, "list", *filters)
        assert result.returncode == 0, result.stderr
        return [line.split() for line in result.stdout.splitlines()[1:] if line.split()[:1] == [transactional_id]]

    def described() -> dict[str, str]:
        result = kafka_tool("kafka-transactions", "--bootstrap-server", bootstrap, "describe",
                            "--transactional-id", transactional_id)
        assert result.returncode == 0, result.stderr
        header, row = (line.split("\t") for line in result.stdout.splitlines()[:2])
        return {name.strip(): value.strip() for name, value in zip(header, row)}

    assert [row[3] for row in listed()] == ["Ongoing"]
    ongoing = described()
    assert (ongoing["TransactionState"], ongoing["TopicPartitions"]) == ("Ongoing", f"{topic}-0")
    assert int(ongoing["CurrentTransactionStartTimeMs"]) > 0
    producer.commit_transaction(30)
    assert [row[3] for row in listed()] in (["CompleteCommit"], ["Empty"])
    finished = described()
    assert (finished["ProducerId"], finished["TopicPartitions"]) == (ongoing["ProducerId"], "")
    assert finished["TransactionState"] in ("CompleteCommit", "Empty")


def test_describe_transactions_answers_each_id_and_write_txn_markers_each_partition(
        kafka_broker: BrokerProcess) -> None:
    """DescribeTransactions and WriteTxnMarkers on the wire: an unknown id and an unknown partition get their errors."""
    from confluent_kafka import Producer

    bootstrap, topic, transactional_id = kafka_bootstrap(kafka_broker), unique("marked"), unique("marked-writer")
    _create(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open")
    producer.flush(10)
    port = kafka_broker.ports["kafka"]
    described = kafka_call(port, ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(
        transactional_ids=(transactional_id, "never-used")))
    mine, unknown = described.transaction_states
    assert (mine.error_code, mine.transaction_state, mine.topics) == (
        0, "Ongoing", (DescribeTransactionsTopic(topic=topic, partitions=(0,)),))
    assert unknown.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    abort = WritableTxnMarker(producer_id=mine.producer_id, producer_epoch=mine.producer_epoch,
                              transaction_result=False, coordinator_epoch=0, topics=(
                                  WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)),
                                  WritableTxnMarkerTopic(name=unique("absent"), partition_indexes=(0,))))
    written = kafka_call(port, ApiKey.WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=(abort,)))
    (result,) = written.markers
    assert result.producer_id == mine.producer_id
    assert [[p.error_code for p in topic.partitions] for topic in result.topics] == [
        [0], [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]]
    producer.abort_transaction(30)  # the coordinator's own markers follow ours; the broker keeps serving
    assert consume_with_confluent(bootstrap, topic, 1, timeout_s=3.0, **{"isolation.level": "read_committed"}) == []
