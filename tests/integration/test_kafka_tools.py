"""Apache Kafka's own command-line tools (4.1, from tests/kafka_reference) against mqbroker's Kafka listener:
topics, console clients, groups, configs, perf tests, leader election, log directories, quorum, reassignments."""

from __future__ import annotations

import json
import pathlib
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


def test_kafka_topics_describe_pages_through_partitions_with_a_cursor_and_shows_the_topic_id(bootstrap: str) -> None:
    topic = unique("tool-pages")
    _ok("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic, "--partitions", "3")
    described = _ok("kafka-topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic,
                    "--partition-size-limit-per-response", "1")  # DescribeTopicPartitions, one partition a page
    assert [line.split("\t")[2] for line in described.splitlines() if "\tPartition: " in line] == [
        f"Partition: {number}" for number in range(3)]
    topic_id = described.split("TopicId: ")[1].split()[0]
    assert topic_id != "AAAAAAAAAAAAAAAAAAAAAA"  # a real topic id, not zeros


def test_kafka_leader_election_finds_preferred_leaders_in_place_and_names_unknown_partitions(bootstrap: str) -> None:
    topic = unique("tool-elect")
    _ok("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic, "--partitions", "2")
    elected = _ok("kafka-leader-election", "--bootstrap-server", bootstrap, "--election-type", "preferred",
                  "--topic", topic, "--partition", "1")
    assert f"Valid replica already elected for partitions {topic}-1" in elected
    unknown = kafka_tool("kafka-leader-election", "--bootstrap-server", bootstrap, "--election-type", "unclean",
                         "--topic", topic, "--partition", "7")
    assert unknown.returncode == 1 and f"partition {topic}-7 does not exist" in unknown.stdout + unknown.stderr


def test_kafka_log_dirs_shows_the_replicas_in_the_data_directory(bootstrap: str) -> None:
    from confluent_kafka import Producer

    topic = unique("tool-logdirs")
    _ok("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic, "--partitions", "2")
    producer = Producer({"bootstrap.servers": bootstrap})
    for number in range(10):
        producer.produce(topic, value=b"x" * 100, partition=0)
    assert producer.flush(10) == 0
    output = _ok("kafka-log-dirs", "--bootstrap-server", bootstrap, "--describe", "--topic-list", topic)
    (broker,) = json.loads(output.strip().splitlines()[-1])["brokers"]
    (log_dir,) = broker["logDirs"]
    sizes = {entry["partition"]: entry["size"] for entry in log_dir["partitions"]}
    assert log_dir["error"] is None and log_dir["logDir"].endswith("data")
    assert sizes[f"{topic}-0"] > 1000 and sizes[f"{topic}-1"] == 0


def test_kafka_metadata_quorum_describes_the_controller_quorum(bootstrap: str) -> None:
    status = dict(line.split(":", 1) for line in _ok("kafka-metadata-quorum", "--bootstrap-server", bootstrap,
                                                        "describe", "--status").splitlines() if ":" in line)
    leader = status["LeaderId"].strip()
    assert status["ClusterId"].strip() == "mqbroker" and int(status["HighWatermark"]) > 0
    assert f'"id": {leader}' in status["CurrentVoters"]
    rows = _ok("kafka-metadata-quorum", "--bootstrap-server", bootstrap, "describe", "--replication").splitlines()
    assert [(row.split()[0], row.split()[-1]) for row in rows[1:]] == [(leader, "Leader")]


def test_kafka_reassign_partitions_executes_verifies_and_lists(bootstrap: str, tmp_path: pathlib.Path) -> None:
    topic = unique("tool-reassign")
    _ok("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic)
    leader = next(line for line in _ok("kafka-topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
                  .splitlines() if "\tPartition: 0" in line).split("Leader: ")[1].split()[0]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0,
                                                               "replicas": [int(leader)]}]}))
    started = _ok("kafka-reassign-partitions", "--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan),
                  "--execute")
    assert f"Successfully started partition reassignment for {topic}-0" in started
    verified = _ok("kafka-reassign-partitions", "--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan),
                   "--verify")  # also clears broker and topic throttles (deleting keys mqbroker never sets)
    assert f"Reassignment of partition {topic}-0 is completed." in verified
    assert "No partition reassignments found." in _ok("kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                                                       "--list")
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [99]}]}))
    refused = kafka_tool("kafka-reassign-partitions", "--bootstrap-server", bootstrap, "--reassignment-json-file",
                         str(plan), "--execute")
    assert refused.returncode == 1 and "Unknown broker id 99" in refused.stdout + refused.stderr
