"""The ``mqbroker`` command against a real three-broker cluster: every read command with ``-o json`` and
with its output on a non-terminal (never truncated, long names whole), bootstrap lists whose first broker
is down, ``MQBROKER_BOOTSTRAP``, and the exit codes.

Most commands run in this process with standard output on a ``StringIO`` (not a terminal, as a pipe is
not): starting an interpreter per command would cost seconds each on a loaded machine. A few run as
users run them, in a child process whose standard output is a real pipe.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

import pytest

from mqbroker.cli import main
from mqbroker.client import Admin, Consumer, Producer
from mqbroker.protocols.native.messages import AclBinding
from tests.integration.brokerprocess import BrokerProcess, free_port
from tests.integration.clusterprocess import retrying, start_cluster, wait_for

CLI = "import sys; from mqbroker.cli import main; sys.exit(main(sys.argv[1:]))"
#: Names far wider than a terminal: a table cut to 80 columns would lose them.
TOPIC = "telemetry-from-the-north-sea-wind-farm-turbine-controllers-with-a-name-longer-than-any-terminal"
GROUP = "billing-service-reading-" + TOPIC
USER = "service-account-for-the-" + TOPIC
SHARE_GROUP = "work-queue-of-" + TOPIC
SUBSCRIPTION = "webhook-of-" + TOPIC
TRANSACTIONAL_ID = "exactly-once-writer-of-" + TOPIC
PRINCIPAL = f"User:{USER}"


@dataclass(frozen=True)
class Cluster:
    """Three brokers, the third killed (still registered, fenced); ``bootstrap`` names it first."""

    brokers: list[BrokerProcess]
    bootstrap: str


def mqbroker(*arguments: str, bootstrap: str | None = None, environment: dict[str, str] | None = None,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the command with its standard output on a pipe (not a terminal), as in `mqbroker ... | grep`."""
    options = [] if bootstrap is None else ["--bootstrap", bootstrap]
    return subprocess.run([sys.executable, "-c", CLI, *arguments, *options], capture_output=True, text=True,
                          input=stdin, timeout=120, env={**os.environ, "COLUMNS": "80", **(environment or {})})


def succeeded(*arguments: str, bootstrap: str) -> str:
    """Standard output of a command that must exit 0, run in this process with output on a non-terminal."""
    output, errors = io.StringIO(), io.StringIO()
    with redirect_stdout(output), redirect_stderr(errors):
        code = main([*arguments, "--bootstrap", bootstrap])
    assert code == 0, errors.getvalue()
    return output.getvalue()


def plain_rows(output: str) -> list[list[str]]:
    """The tab-separated rows of plain output."""
    return [line.split("\t") for line in output.splitlines()]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A topic with records, a group with commits, a user, an ACL and a reassignment stuck in progress
    (its target includes the killed broker)."""
    brokers = start_cluster(tmp_path_factory.mktemp("cli-cluster"))
    try:
        live, dead = brokers[0].bootstrap, brokers[2]
        dead.kill()
        with Admin(live) as admin:
            wait_for(lambda: any(broker.node_id == 3 and broker.state == "fenced"
                                 for broker in admin.describe_quorum().brokers), 60, "broker 3 fenced")
            retrying(lambda: admin.create_topics([TOPIC], partitions=2, replication_factor=2))
            admin.create_acls([AclBinding(resource_type="topic", resource_name=TOPIC, pattern_type="literal",
                                          principal=PRINCIPAL, host="*", operation="read", permission="allow")])
            admin.upsert_user(USER, "secret", create=True)
        with Producer(live, acks="all") as producer:
            for number in range(10):
                producer.send(TOPIC, value=b"reading %d" % number, key=b"turbine-%d" % (number % 3), partition=1)
        with Consumer(live, group_id=GROUP, topics=[TOPIC], auto_offset_reset="earliest",
                      enable_auto_commit=False) as consumer:
            read = 0
            while read < 10:
                read += len(consumer.poll(0.5))
            consumer.commit({(TOPIC, 1): 7})
        with Admin(live) as admin:
            admin.reassign_partition(TOPIC, 0, [1, 2, 3])
        yield Cluster(brokers, f"{dead.bootstrap},{live}")
    finally:
        for broker in brokers:
            broker.kill()


def test_topics_list(cluster: Cluster) -> None:
    listed = json.loads(succeeded("topics", "list", "-o", "json", bootstrap=cluster.bootstrap))
    [topic] = [topic for topic in listed["topics"] if topic["name"] == TOPIC]
    assert (topic["partitions"], topic["internal"]) == (2, False)
    rows = plain_rows(succeeded("topics", "list", bootstrap=cluster.bootstrap))
    assert rows[0] == ["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"]
    assert [TOPIC, "2"] in [row[:2] for row in rows]
    assert TOPIC in succeeded("topics", "list", "--no-headers", bootstrap=cluster.bootstrap).split()


def test_topics_describe(cluster: Cluster) -> None:
    described = json.loads(succeeded("topics", "describe", TOPIC, "--json", bootstrap=cluster.bootstrap))
    assert described["name"] == TOPIC and described["configs"]["cleanup.policy"] == "delete"
    assert [(p["partition"], p["earliest"], p["latest"]) for p in described["partitions"]] == [(0, 0, 0), (1, 0, 10)]
    assert set(described["partitions"][0]["replicas"]) == {1, 2, 3}  # the target joined, still catching up
    piped = succeeded("topics", "describe", TOPIC, bootstrap=cluster.bootstrap)
    partitions, configs = piped.split("\n\n")
    assert plain_rows(partitions)[0] == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "EARLIEST", "LATEST"]
    assert [row[0] for row in plain_rows(partitions)[1:]] == [TOPIC, TOPIC]
    assert ["cleanup.policy", "delete"] in plain_rows(configs)


def test_offsets(cluster: Cluster) -> None:
    offsets = json.loads(succeeded("offsets", TOPIC, "--time", "0", "-o", "json", bootstrap=cluster.bootstrap))
    assert offsets["topic"] == TOPIC
    assert [(p["partition"], p["earliest"], p["latest"], p["at_time"]) for p in offsets["partitions"]] == [
        (0, 0, 0, None), (1, 0, 10, 0)]
    assert plain_rows(succeeded("offsets", TOPIC, bootstrap=cluster.bootstrap))[1:] == [
        [TOPIC, "0", "0", "0"], [TOPIC, "1", "0", "10"]]


def test_topics_reassign_status(cluster: Cluster) -> None:
    status = json.loads(succeeded("topics", "reassign", TOPIC, "--status", "-o", "json", bootstrap=cluster.bootstrap))
    [moving] = status["reassignments"]
    assert (moving["topic"], moving["partition"], moving["target"]) == (TOPIC, 0, [1, 2, 3])
    assert 3 in moving["adding"]
    rows = plain_rows(succeeded("topics", "reassign", TOPIC, "--status", bootstrap=cluster.bootstrap))
    assert rows[0] == ["TOPIC", "PARTITION", "REPLICAS", "TARGET", "CATCHING-UP", "LEAVING"]
    assert rows[1][:2] == [TOPIC, "0"] and rows[1][3] == "1,2,3"


def test_groups_list(cluster: Cluster) -> None:
    listed = json.loads(succeeded("groups", "list", "-o", "json", bootstrap=cluster.bootstrap))
    assert {"group": GROUP, "state": "Empty"} in listed["groups"]
    assert [GROUP, "Empty"] in plain_rows(succeeded("groups", "list", bootstrap=cluster.bootstrap))


def test_groups_describe(cluster: Cluster) -> None:
    described = json.loads(succeeded("groups", "describe", GROUP, "-o", "json", bootstrap=cluster.bootstrap))
    assert (described["group"], described["state"], described["members"]) == (GROUP, "Empty", [])
    assert described["partitions"] == [{"group": GROUP, "topic": TOPIC, "partition": 1, "committed": 7, "log_end": 10,
                                        "lag": 3, "member_id": None, "client_id": None, "host": None}]
    summary, partitions = succeeded("groups", "describe", GROUP, bootstrap=cluster.bootstrap).split("\n\n")
    assert plain_rows(summary) == [["GROUP", "STATE", "ASSIGNOR", "MEMBERS"], [GROUP, "Empty", "-", "0"]]
    assert plain_rows(partitions) == [
        ["GROUP", "TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "MEMBER", "CLIENT-ID", "HOST"],
        [GROUP, TOPIC, "1", "7", "10", "3", "-", "-", "-"],
    ]


def test_output_through_a_real_pipe_is_plain_and_a_table_asked_for_keeps_every_name_whole(cluster: Cluster) -> None:
    piped = mqbroker("groups", "describe", GROUP, bootstrap=cluster.bootstrap)
    assert piped.returncode == 0, piped.stderr
    assert [GROUP, TOPIC, "1", "7", "10", "3", "-", "-", "-"] in plain_rows(piped.stdout)
    table = mqbroker("groups", "describe", GROUP, "-o", "table", bootstrap=cluster.bootstrap).stdout
    assert GROUP in table and TOPIC in table and "…" not in table
    assert any("┃" in line for line in table.splitlines())


def test_share_groups_list_and_describe(cluster: Cluster) -> None:
    succeeded("share-groups", "create", SHARE_GROUP, "--topic", TOPIC, "--start", "earliest", bootstrap=cluster.bootstrap)
    listed = json.loads(succeeded("share-groups", "list", "-o", "json", bootstrap=cluster.bootstrap))
    assert {"group": SHARE_GROUP, "topics": [TOPIC], "members": 0, "push_endpoint": None} in listed["share_groups"]
    assert any(row[:2] == [SHARE_GROUP, TOPIC] for row in plain_rows(succeeded("share-groups", "list",
                                                                                bootstrap=cluster.bootstrap)))
    described = json.loads(succeeded("share-groups", "describe", SHARE_GROUP, "-o", "json", bootstrap=cluster.bootstrap))
    assert (described["group"], described["topics"], described["members"]) == (SHARE_GROUP, [TOPIC], [])
    piped = mqbroker("share-groups", "describe", SHARE_GROUP, bootstrap=cluster.bootstrap)
    assert piped.returncode == 0, piped.stderr
    assert any(row[:2] == [SHARE_GROUP, TOPIC] for row in plain_rows(piped.stdout)) and "…" not in piped.stdout


def test_subscriptions_list_and_describe(cluster: Cluster) -> None:
    endpoint = "http://127.0.0.1:9/hooks/" + TOPIC  # nothing listens: the records wait, the settings are what count
    succeeded("subscriptions", "create", SUBSCRIPTION, "--topic", TOPIC, "--push-endpoint", endpoint,
              bootstrap=cluster.bootstrap)
    listed = json.loads(succeeded("subscriptions", "list", "-o", "json", bootstrap=cluster.bootstrap))
    assert {"name": SUBSCRIPTION, "topics": [TOPIC], "endpoint": endpoint} in next(iter(listed.values()))
    assert [SUBSCRIPTION, TOPIC, endpoint] in plain_rows(succeeded("subscriptions", "list", bootstrap=cluster.bootstrap))
    described = json.loads(succeeded("subscriptions", "describe", SUBSCRIPTION, "-o", "json",
                                     bootstrap=cluster.bootstrap))
    assert described["group"] == SUBSCRIPTION and described["topics"] == [TOPIC]
    piped = mqbroker("subscriptions", "describe", SUBSCRIPTION, bootstrap=cluster.bootstrap)
    assert piped.returncode == 0, piped.stderr
    assert any(row[:2] == [SUBSCRIPTION, TOPIC] for row in plain_rows(piped.stdout)) and "…" not in piped.stdout


def test_transactions_list_and_describe(cluster: Cluster) -> None:
    with Producer(cluster.bootstrap.split(",")[1], transactional_id=TRANSACTIONAL_ID) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, value=b"committed", partition=0)
        producer.commit_transaction()

    def listed_states() -> list[str]:
        listed = json.loads(succeeded("transactions", "list", "-o", "json", bootstrap=cluster.bootstrap))
        return [record["state"] for record in listed["transactions"] if record["transactional_id"] == TRANSACTIONAL_ID]

    # answered at PrepareCommit; the completion follows once the markers are written (docs/transactions.md)
    wait_for(lambda: listed_states() == ["CompleteCommit"], 30, "the transaction completed")
    assert any(row[0] == TRANSACTIONAL_ID and row[-1] == "CompleteCommit"
               for row in plain_rows(succeeded("transactions", "list", bootstrap=cluster.bootstrap)))
    described = json.loads(succeeded("transactions", "describe", TRANSACTIONAL_ID, "-o", "json",
                                     bootstrap=cluster.bootstrap))
    assert (described["transactional_id"], described["state"]) == (TRANSACTIONAL_ID, "CompleteCommit")
    piped = mqbroker("transactions", "describe", TRANSACTIONAL_ID, bootstrap=cluster.bootstrap)
    assert piped.returncode == 0, piped.stderr
    assert any(row[:2] == [TRANSACTIONAL_ID, "CompleteCommit"] for row in plain_rows(piped.stdout))


def test_groups_reset_offsets_dry_run(cluster: Cluster) -> None:
    arguments = ("groups", "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest", "--dry-run")
    assert json.loads(succeeded(*arguments, "-o", "json", bootstrap=cluster.bootstrap)) == {
        "group": GROUP, "dry_run": True, "offsets": [
            {"group": GROUP, "topic": TOPIC, "partition": 0, "offset": 0},
            {"group": GROUP, "topic": TOPIC, "partition": 1, "offset": 0}]}
    assert plain_rows(succeeded(*arguments, bootstrap=cluster.bootstrap))[1:] == [
        [GROUP, TOPIC, "0", "0"], [GROUP, TOPIC, "1", "0"]]
    assert json.loads(succeeded("groups", "describe", GROUP, "--json", bootstrap=cluster.bootstrap))[
        "partitions"][0]["committed"] == 7  # a dry run commits nothing


def test_cluster_describe(cluster: Cluster) -> None:
    described = json.loads(succeeded("cluster", "describe", "--json", bootstrap=cluster.bootstrap))
    assert described["voters"] == [1, 2, 3] and described["leader"] in (1, 2)
    states = {broker["node_id"]: broker["state"] for broker in described["brokers"]}
    assert states == {1: "active", 2: "active", 3: "fenced"}
    quorum, brokers = succeeded("cluster", "describe", bootstrap=cluster.bootstrap).split("\n\n")
    assert plain_rows(quorum)[0] == ["CONTROLLER-LEADER", "TERM", "COMMIT-INDEX", "APPLIED-INDEX", "VOTERS",
                                     "ANSWERED-BY"]
    assert plain_rows(quorum)[1][4] == "1,2,3"
    dead = cluster.brokers[2]
    assert ["3", "127.0.0.1", str(dead.ports["native"]), "fenced"] in plain_rows(brokers)


def test_users_list(cluster: Cluster) -> None:
    assert {"name": USER} in json.loads(succeeded("users", "list", "-o", "json", bootstrap=cluster.bootstrap))["users"]
    assert [USER] in plain_rows(succeeded("users", "list", bootstrap=cluster.bootstrap))


def test_acls_list(cluster: Cluster) -> None:
    listed = json.loads(succeeded("acls", "list", "--topic", TOPIC, "-o", "json", bootstrap=cluster.bootstrap))
    assert listed == {"acls": [{"permission": "allow", "principal": PRINCIPAL, "operation": "read",
                                "resource_type": "topic", "resource_name": TOPIC, "pattern_type": "literal",
                                "host": "*"}]}
    assert plain_rows(succeeded("acls", "list", "--principal", PRINCIPAL, bootstrap=cluster.bootstrap))[1:] == [
        ["allow", PRINCIPAL, "read", "topic", TOPIC, "literal", "*"]]


def test_consume_prints_json_lines_or_the_format_template(cluster: Cluster) -> None:
    arguments = ("consume", TOPIC, "--partition", "1", "--offset", "8", "--max-messages", "2", "--timeout-ms", "20000")
    lines = succeeded(*arguments, "-o", "json", bootstrap=cluster.bootstrap).splitlines()
    assert [json.loads(line) for line in lines] == [
        {"topic": TOPIC, "partition": 1, "offset": offset, "timestamp": json.loads(line)["timestamp"],
         "key": f"turbine-{offset % 3}", "value": f"reading {offset}", "headers": []}
        for offset, line in zip((8, 9), lines)
    ]
    piped = succeeded(*arguments, "--format", "{topic}\t{offset}\t{key}\t{value}", bootstrap=cluster.bootstrap)
    assert plain_rows(piped) == [[TOPIC, "8", "turbine-2", "reading 8"], [TOPIC, "9", "turbine-0", "reading 9"]]


def test_produce_and_consume_with_the_bootstrap_from_the_environment(cluster: Cluster) -> None:
    environment = {"MQBROKER_BOOTSTRAP": cluster.bootstrap}
    produced = mqbroker("produce", "from-the-environment", "--key-separator", ":", stdin="k1:one\nk2:two\n",
                        environment=environment)
    assert produced.returncode == 0, produced.stderr
    assert "produced 2 message(s)" in produced.stderr
    consumed = mqbroker("consume", "from-the-environment", "--from-beginning", "--max-messages", "2",
                        "--format", "{key}={value}", "--timeout-ms", "20000", environment=environment)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == ["k1=one", "k2=two"]


def test_exit_codes_say_what_went_wrong(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    nowhere = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    unreachable = mqbroker("topics", "list", bootstrap=nowhere)
    assert unreachable.returncode == 3 and f"cannot reach a broker at {nowhere}" in unreachable.stderr
    missing = mqbroker("topics", "describe", "no-such-topic", bootstrap=cluster.bootstrap)
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
    for usage in (("consume", TOPIC, "--offset", "3"), ("topics", "list", "-o", "yaml"),
                  ("topics", "create", "x", "--config", "no-equals-sign")):
        done = mqbroker(*usage, bootstrap=cluster.bootstrap)
        assert done.returncode == 2, (usage, done.stderr)
    assert mqbroker("topics", "list", bootstrap="no-port-here").returncode == 2


def _http(broker: BrokerProcess) -> str:
    return f"http://127.0.0.1:{broker.ports['http']}"


def test_mqtt_mapping_rules_set_on_one_broker_read_on_another_and_reset(cluster: Cluster) -> None:
    first, second = cluster.brokers[0], cluster.brokers[1]
    log_topic = "mqtt.wind-farm-alarms-" + TOPIC[:120]
    rule = f"turbines/+/alarms={log_topic}"
    done = mqbroker("mqtt", "mapping-rules", "set", rule, "-o", "json", "--http", _http(first))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rules"] == [{"filter": "turbines/+/alarms", "log_topic": log_topic}]

    def read_on_second() -> dict[str, object]:
        found = mqbroker("mqtt", "mapping-rules", "get", "-o", "json", "--http", _http(second))
        assert found.returncode == 0, found.stderr
        return dict(json.loads(found.stdout))

    wait_for(lambda: read_on_second()["source"] == "cluster", 20, "the rules applied on the second broker")
    assert read_on_second()["rules"] == [{"filter": "turbines/+/alarms", "log_topic": log_topic}]
    piped = mqbroker("mqtt", "mapping-rules", "get", "--http", _http(second))  # plain on a pipe, nothing cut
    assert plain_rows(piped.stdout) == [["ORDER", "MQTT-TOPIC-FILTER", "LOG-TOPIC"], ["1", "turbines/+/alarms", log_topic],
                                        ["-", "(anything else)", "mqtt.messages"]]
    with Admin(first.bootstrap) as admin:
        assert [t.name for t in admin.metadata([log_topic]).topics if t.error_code == 0] == [log_topic], "created"
    refused = mqbroker("mqtt", "mapping-rules", "set", "a/#/b=x", "--http", _http(first))
    assert refused.returncode == 1 and "'#' must be a whole last level" in refused.stderr
    internal = mqbroker("mqtt", "mapping-rules", "set", "a=__consumer_offsets", "--http", _http(first))
    assert internal.returncode == 1 and "internal" in internal.stderr
    assert mqbroker("mqtt", "mapping-rules", "set", "no-equals-sign", "--http", _http(first)).returncode == 2
    unreachable = mqbroker("mqtt", "mapping-rules", "get", "--http", f"http://127.0.0.1:{free_port()}")
    assert unreachable.returncode == 3 and "cannot reach the admin API" in unreachable.stderr
    reset = mqbroker("mqtt", "mapping-rules", "reset", "-o", "json", "--http", _http(first))
    assert reset.returncode == 0 and json.loads(reset.stdout)["source"] == "configuration", reset.stderr


def test_cluster_configs_set_show_and_reset_the_cluster_wide_topic_defaults(cluster: Cluster) -> None:
    succeeded("cluster", "alter-configs", "--config", "retention.ms=3600000", bootstrap=cluster.bootstrap)
    try:
        shown = json.loads(succeeded("cluster", "configs", "--json", bootstrap=cluster.bootstrap))
        assert shown["configs"]["retention.ms"] == "3600000"
        assert ["retention.ms", "3600000"] in plain_rows(succeeded("cluster", "configs", bootstrap=cluster.bootstrap))
        wait_for(lambda: json.loads(succeeded("topics", "describe", TOPIC, "--json", bootstrap=cluster.bootstrap))[
            "configs"]["retention.ms"] == "3600000", 20, "the topic inherits the cluster-wide default")
        refused = mqbroker("cluster", "alter-configs", "--config", "num.partitions=3", bootstrap=cluster.bootstrap)
        assert refused.returncode == 1 and "'num.partitions' is not a topic configuration key" in refused.stderr
    finally:
        succeeded("cluster", "alter-configs", "--delete-config", "retention.ms", bootstrap=cluster.bootstrap)
    assert "retention.ms" not in json.loads(succeeded("cluster", "configs", "--json", bootstrap=cluster.bootstrap))[
        "configs"]
