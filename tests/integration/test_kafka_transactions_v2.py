"""Transactions version 2 (KIP-890 part 2) with Apache Kafka's own Java client (kafka-clients 4.x, which uses it
when the broker finalizes ``transaction.version`` 2): every commit and abort bumps the producer epoch, Produce
and TxnOffsetCommit add their partitions to the transaction, an older producer is fenced, and a read_committed
consumer sees exactly the committed records. ``kafka_java/TransactionVersion2.java`` is compiled with javac
against the reference jars (``tests/kafka_reference/kafka_reference.sh install``) and run against a broker."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

import pytest

from mqbroker.protocols.kafka.messages.apis import ApiKey
from mqbroker.protocols.kafka.messages.cluster import ApiVersionsRequest
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import start_cluster, wait_for
from tests.integration.kafka_support import (
    FAST_GROUPS,
    REFERENCE,
    kafka_bootstrap,
    kafka_call,
    kafka_broker_fixture,
    unique,
)

SOURCE = pathlib.Path(__file__).resolve().parent / "kafka_java" / "TransactionVersion2.java"
CLASSPATH_JARS = f"{REFERENCE / 'lib'}/*"


kafka_broker = kafka_broker_fixture("kafka-transactions-v2")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    classes = tmp_path_factory.mktemp("tv2-classes")
    subprocess.run(["javac", "-d", str(classes), "-cp", CLASSPATH_JARS, str(SOURCE)], check=True, timeout=120)
    return classes


def test_api_versions_finalize_transaction_version_2(kafka_broker: BrokerProcess) -> None:
    answer = kafka_call(kafka_broker.ports["kafka"], ApiKey.API_VERSIONS, 3,
                        ApiVersionsRequest(client_software_name="test", client_software_version="1"))
    finalized = {feature.name: feature.max_version_level for feature in answer.finalized_features}
    supported = {feature.name: feature.max_version for feature in answer.supported_features}
    assert finalized == {"transaction.version": 2} and supported == {"transaction.version": 2}
    assert answer.finalized_features_epoch >= 0
    versions = {api.api_key: api.max_version for api in answer.api_keys}
    assert versions[ApiKey.END_TXN] >= 5 and versions[ApiKey.PRODUCE] >= 12
    assert versions[ApiKey.TXN_OFFSET_COMMIT] >= 5


def test_java_client_transactions_v2(kafka_broker: BrokerProcess, compiled: pathlib.Path) -> None:
    _run_and_check(kafka_bootstrap(kafka_broker), compiled)


@pytest.mark.slow
def test_java_client_transactions_v2_across_brokers(tmp_path: pathlib.Path, compiled: pathlib.Path) -> None:
    """Three brokers: partition leaders that are not the transaction's coordinator add their partition over the
    inter-broker protocol, and the markers go to every leader."""
    brokers = start_cluster(tmp_path, 3, list(FAST_GROUPS))
    try:
        _run_and_check(",".join(kafka_bootstrap(broker) for broker in brokers), compiled, spread_over=3)
    finally:
        for broker in brokers:
            broker.kill()


def _run_and_check(bootstrap: str, compiled: pathlib.Path, spread_over: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique("tv2")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(20)
    leaders = wait_for(lambda: _leaders(admin, topic), 20, "a leader for every partition")
    assert len(set(leaders)) == spread_over, leaders
    run = subprocess.run(
        ["java", "-Xmx256m", "-XX:+UseSerialGC", f"-Dlog4j2.configurationFile={REFERENCE / 'log4j2-tools.xml'}",
         "-cp", f"{compiled}:{CLASSPATH_JARS}", "TransactionVersion2", bootstrap, topic, unique("tv2-id"),
         unique("tv2-group")],
        capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0, run.stderr[-4000:]
    lines = run.stdout.splitlines()
    epochs = {line.split()[1]: int(line.split()[2]) for line in lines if line.startswith("epoch ")}
    # Every decision moves the producer to the next epoch (a version 1 broker keeps it); a new producer
    # (InitProducerId) bumps it too.
    assert [epochs[step] for step in ("init", "commit1", "abort", "commit2", "fence", "second")] == [0, 1, 2, 3, 4, 5]
    assert "fenced ProducerFencedException" in lines, run.stdout
    assert "offset 5" in lines  # TxnOffsetCommit 5 joined the transaction without AddOffsetsToTxn
    read = [line.split()[1] for line in lines if line.startswith("read ")]
    expected = sorted(f"{prefix}-{number}" for prefix in ("commit1", "commit2", "second") for number in range(6))
    assert read == expected  # nothing aborted, nothing of the zombie, every committed record once


def _leaders(admin: Any, topic: str) -> list[int] | None:
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    leaders = [partitions[number].leader for number in sorted(partitions)]
    return leaders if len(leaders) == 3 and min(leaders) >= 0 else None
