"""Apache Kafka's own command-line tools (4.1, from tests/kafka_reference) against mqbroker's Kafka listener."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.kafka_support import kafka_bootstrap, kafka_tool, start_kafka_broker, unique


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    for process in start_kafka_broker(tmp_path_factory.mktemp("kafka-tools")):
        yield kafka_bootstrap(process)


def _ok(name: str, *args: str, stdin: str | None = None) -> str:
    result = kafka_tool(name, *args, stdin=stdin)
    assert result.returncode == 0, f"{name} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_kafka_topics_creates_describes_grows_and_deletes(bootstrap: str) -> None:
    topic = unique("tool-topic")
    assert f"Created topic {topic}." in _ok("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                                            "--partitions", "2", "--config", "retention.ms=3600000")
    described = _ok("kafka-topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    assert "PartitionCount: 2" in described and "retention.ms=3600000" in described
    _ok("kafka-topics", "--bootstrap-server", bootstrap, "--alter", "--topic", topic, "--partitions", "3")
    assert "PartitionCount: 3" in _ok("kafka-topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    _ok("kafka-topics", "--bootstrap-server", bootstrap, "--delete", "--topic", topic)
    assert topic not in _ok("kafka-topics", "--bootstrap-server", bootstrap, "--list").split()


def test_console_producer_and_consumer_groups_describe_and_reset_offsets(bootstrap: str) -> None:
    topic, group = unique("tool-console"), unique("tool-group")
    lines = [f"key{i}:value {i}" for i in range(10)]
    _ok("kafka-console-producer", "--bootstrap-server", bootstrap, "--topic", topic, "--property", "parse.key=true",
        "--property", "key.separator=:", stdin="\n".join(lines) + "\n")
    consumed = _ok("kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
                   "--from-beginning", "--max-messages", "10", "--property", "print.key=true",
                   "--property", "key.separator=:")
    assert consumed.splitlines() == lines
    described = _ok("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
    [row] = [line.split() for line in described.splitlines() if line.startswith(group)]
    assert row[1:6] == [topic, "0", "10", "10", "0"]  # topic, partition, current offset, log end, lag
    reset = _ok("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--group", group, "--reset-offsets",
                "--to-offset", "4", "--topic", topic, "--execute")
    assert any(line.split()[-1] == "4" for line in reset.splitlines() if line.startswith(group))
    again = _ok("kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
                "--max-messages", "6")
    assert again.splitlines() == [f"value {i}" for i in range(4, 10)]
    assert group in _ok("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--list").split()


def test_consumer_groups_deletes_the_offsets_of_an_empty_group(bootstrap: str) -> None:
    topic, group = unique("tool-offsets"), unique("tool-delete-offsets")
    _ok("kafka-console-producer", "--bootstrap-server", bootstrap, "--topic", topic, stdin="a\nb\n")
    _ok("kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
        "--from-beginning", "--max-messages", "2")
    deleted = _ok("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--delete-offsets", "--group", group,
                  "--topic", topic)
    assert f"Request succeeded for deleting offsets from group {group}." in deleted
    [row] = [line.split() for line in deleted.splitlines() if line.startswith(topic)]
    assert row == [topic, "0", "Successful"]
    unknown = kafka_tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--delete-offsets", "--group",
                         unique("nobody"), "--topic", topic)
    assert "GroupIdNotFoundException" in unknown.stdout + unknown.stderr


def test_kafka_cluster_and_kafka_transactions_describe_the_cluster(bootstrap: str) -> None:
    assert _ok("kafka-cluster", "cluster-id", "--bootstrap-server", bootstrap).strip() == "Cluster ID: mqbroker"
    listed = _ok("kafka-transactions", "--bootstrap-server", bootstrap, "list")
    assert listed.split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]  # none open


def test_kafka_configs_alters_and_describes_topic_overrides(bootstrap: str) -> None:
    topic = unique("tool-configs")
    _ok("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic)
    _ok("kafka-configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", topic,
        "--alter", "--add-config", "retention.ms=60000,max.message.bytes=2000000")
    described = _ok("kafka-configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", topic,
                    "--describe")
    assert "retention.ms=60000" in described and "max.message.bytes=2000000" in described
    _ok("kafka-configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", topic,
        "--alter", "--delete-config", "retention.ms")
    described = _ok("kafka-configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", topic,
                    "--describe")
    assert "retention.ms" not in described and "max.message.bytes=2000000" in described


def test_producer_and_consumer_perf_tests_run_to_completion(bootstrap: str) -> None:
    topic = unique("tool-perf")
    produced = _ok("kafka-producer-perf-test", "--topic", topic, "--num-records", "20000", "--record-size", "100",
                   "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all",
                   "compression.type=lz4")
    assert "20000 records sent" in produced
    consumed = _ok("kafka-consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic, "--messages", "20000",
                   "--timeout", "30000")
    assert consumed.strip().splitlines()[-1].split(", ")[4] == "20000"  # data.consumed.in.nMsg
