"""The admin HTTP API against a real broker: every route of its OpenAPI document, with real clients around it.

Every answer is checked against the document (status documented, body matching its schema);
the last test walks the document and fails for any route no test exercised successfully.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pytest
import requests
from openapi_spec_validator import validate
from paho.mqtt.enums import CallbackAPIVersion

from mqbroker.client import Consumer, Producer
from tests.integration.admin_api_support import QUEUE_TAGS, AdminApi, operations_tagged
from tests.integration.brokerprocess import BrokerProcess, running
from tests.integration.clusterprocess import wait_for
from tests.integration.mqtt_support import Client as MqttClient
from tests.integration.mqtt_support import MqttBroker
from tests.integration.nativewire import produce_batch
from tests.integration.security_support import start_secured_broker
from tests.poison import poison_batch


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The embedded default broker (anonymous, allow-all), all listeners on."""
    yield from running(MqttBroker(data_dir=tmp_path_factory.mktemp("admin-api") / "data"))


@pytest.fixture(scope="module")
def api(broker: BrokerProcess) -> AdminApi:
    """The API client of the module: it remembers which operations answered a success."""
    return AdminApi(f"http://127.0.0.1:{broker.ports['http']}")


def _produce(broker: BrokerProcess, topic: str, values: list[bytes], partition: int = 0,
             headers: list[tuple[str, bytes | None]] | None = None) -> None:
    with Producer(broker.bootstrap, acks="all") as producer:
        for value in values:
            producer.send(topic, value=value, key=b"k", partition=partition, headers=headers)
        producer.flush()


def test_the_document_is_valid_openapi_and_the_index_lists_what_is_not_there_yet(api: AdminApi) -> None:
    validate(api.document)
    assert api.document["openapi"] == "3.1.0"
    index = api.json("getIndex")
    present = {section["name"]: section["present"] for section in index["sections"]}
    assert present["topics"] and present["consumer groups"] and present["MQTT"] and present["ACLs"]
    assert present["transactions"] is False


def test_cluster_brokers_counters_and_configuration(api: AdminApi, broker: BrokerProcess) -> None:
    cluster = api.json("describeCluster")
    assert cluster["node_id"] == 1 and cluster["controller_id"] == 1
    assert cluster["raft"]["leader"] == 1 and cluster["raft"]["term"] >= 1 and cluster["raft"]["voters"] == [1]
    assert cluster["partitions"]["offline"] == 0 and cluster["partitions"]["total"] >= 1
    (only,) = api.json("listBrokers")
    assert only == {"node_id": 1, "host": "127.0.0.1", "port": broker.ports["native"], "state": "active",
                    "controller": True, "voter": True, "this_broker": True}
    assert api.json("describeBroker", node_id=1) == only
    api.call("describeBroker", node_id=7, expect=404)
    api.call("describeBroker", node_id="seven", expect=400)
    before = api.json("getCounters")
    _produce(broker, "counted", [b"x" * 100] * 10)
    after = api.json("getCounters")
    assert after["produced_records"] >= before["produced_records"] + 10 and after["time_ms"] >= before["time_ms"]
    configuration = api.json("getConfiguration")
    assert configuration["native_port"] == broker.ports["native"] and configuration["node_id"] == 1


def test_a_topic_from_creation_to_deletion(api: AdminApi, broker: BrokerProcess) -> None:
    created = api.json("createTopic", json={"name": "orders", "partitions": 2, "configs": {"retention.ms": "3600000"}})
    assert [p["partition"] for p in created["partitions"]] == [0, 1] and created["configs"]["retention.ms"] == "3600000"
    api.call("createTopic", json={"name": "orders"}, expect=409)
    api.call("createTopic", json={"name": "bad/name"}, expect=400)
    api.call("createTopic", json={"name": "x", "partitions": 0}, expect=400)
    checked = api.json("createTopic", json={"name": "only-checked", "validate_only": True})
    assert checked["partitions"] == []
    assert "only-checked" not in [t["name"] for t in api.json("listTopics")]
    listed = {t["name"]: t for t in api.json("listTopics")}
    assert listed["orders"]["partitions"] == 2 and listed["orders"]["under_replicated"] == 0
    assert "__consumer_offsets" not in listed
    assert "__consumer_offsets" in [t["name"] for t in api.json("listTopics", params={"internal": "true"})]

    _produce(broker, "orders", [b"one", b"two", b"three"], partition=1)
    described = api.json("describeTopic", topic="orders")
    partition = described["partitions"][1]
    assert partition["leader"] == 1 and partition["isr"] == [1] and partition["earliest_offset"] == 0
    assert partition["latest_offset"] == 3 and partition["size_bytes"] > 0
    assert api.json("describePartition", topic="orders", partition=1) == partition
    api.call("describePartition", topic="orders", partition=9, expect=404)
    assert api.json("listPartitions", topic="orders") == described["partitions"]

    configs = api.json("alterTopicConfigs", topic="orders", json={"set": {"cleanup.policy": "compact"},
                                                                   "delete": ["retention.ms"]})
    assert configs["cleanup.policy"] == "compact" and configs["retention.ms"] == "604800000"
    assert api.json("describeTopicConfigs", topic="orders") == configs
    api.call("alterTopicConfigs", topic="orders", json={"set": {"retention.ms": "soon"}}, expect=400)

    grown = api.json("addPartitions", topic="orders", json={"count": 4})
    assert len(grown) == 4
    api.call("addPartitions", topic="orders", json={"count": 2}, expect=400)

    start = api.json("deleteRecords", topic="orders", partition=1, params={"before_offset": 2})
    assert start == {"topic": "orders", "partition": 1, "log_start_offset": 2}
    assert api.json("describePartition", topic="orders", partition=1)["earliest_offset"] == 2
    api.call("deleteRecords", topic="orders", partition=1, params={"before_offset": 99}, expect=400)

    api.call("deleteTopic", topic="orders", expect=204)
    api.call("describeTopic", topic="orders", expect=404)
    api.call("deleteTopic", topic="orders", expect=404)
    assert "DELETE /api/v1/topics/orders principal=User:ANONYMOUS host=127.0.0.1 status=204" in broker.log_text()


def test_the_message_browser_reads_by_offset_and_time_and_decodes_text(api: AdminApi, broker: BrokerProcess) -> None:
    api.json("createTopic", json={"name": "readings", "partitions": 2})
    _produce(broker, "readings", [json.dumps({"t": n}).encode() for n in range(30)], partition=0)
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    _produce(broker, "readings", [b"\xff\xfe binary", "ünïcode".encode()], partition=1,
             headers=[("source", b"sensor-7"), ("empty", None)])

    recent = api.json("browseRecords", topic="readings", params={"limit": 5})["records"]
    assert [r["partition"] for r in recent][-2:] == [1, 1] and len(recent) == 5
    binary, text = recent[-2:]
    assert binary["value"]["text"] is None and binary["value"]["base64"] == "//4gYmluYXJ5"
    assert text["value"]["text"] == "ünïcode" and text["headers"] == [
        {"key": "source", "value": {"text": "sensor-7", "base64": None, "truncated": False}},
        {"key": "empty", "value": None}]
    page = api.json("browseRecords", topic="readings", params={"partition": 0, "offset": 10, "limit": 3})
    assert [r["offset"] for r in page["records"]] == [10, 11, 12] and page["next_offsets"] == {"0": 13}
    assert json.loads(page["records"][0]["value"]["text"]) == {"t": 10}
    later = api.json("browseRecords", topic="readings", params={"timestamp_ms": middle_ms})["records"]
    assert [r["partition"] for r in later] == [1, 1]
    big = [b"%04d" % n + b"." * 8_000 for n in range(40)]  # 320 KB in 40 batches: reads of 64, 128, 256 KiB
    for value in big:
        _produce(broker, "readings", [value], partition=0)
    many = api.json("browseRecords", topic="readings", params={"partition": 0, "offset": 30, "limit": 40})
    assert [r["value"]["text"][:4] for r in many["records"]] == ["%04d" % n for n in range(40)]
    assert [r["offset"] for r in many["records"]] == list(range(30, 70)) and many["next_offsets"] == {"0": 70}
    beyond = api.json("browseRecords", topic="readings", params={"partition": 0, "offset": 500})
    assert beyond["records"] == [] and beyond["next_offsets"] == {}
    api.call("browseRecords", topic="readings", params={"partition": 5}, expect=404)
    api.call("browseRecords", topic="readings", params={"limit": 100_000}, expect=400)
    api.call("browseRecords", topic="no-such-topic", expect=404)


def test_consumer_group_members_lag_reset_and_deletion(api: AdminApi, broker: BrokerProcess) -> None:
    api.json("createTopic", json={"name": "payments", "partitions": 1})
    _produce(broker, "payments", [b"p%d" % n for n in range(20)])
    consumer = Consumer(broker.bootstrap, group_id="billing", topics=["payments"], auto_offset_reset="earliest",
                        enable_auto_commit=False, client_id="billing-1")
    try:
        taken = 0
        while taken < 5:
            taken += len(consumer.poll(timeout=1.0))
        consumer.commit({("payments", 0): 5})
        group = wait_for(lambda: (g := api.json("describeGroup", group="billing"))["members"] and g, 20)
        assert group["state"] == "Stable" and group["members"][0]["client_id"] == "billing-1"
        assert group["members"][0]["assignment"] == [{"topic": "payments", "partition": 0}]
        assert group["offsets"] == [{"topic": "payments", "partition": 0, "committed_offset": 5, "latest_offset": 20,
                                     "lag": 15}] and group["total_lag"] == 15
        assert {"group_id": "billing", "state": "Stable", "protocol_type": "consumer"} in api.json("listGroups")
        api.call("resetGroupOffsets", group="billing", json={"to": "earliest"}, expect=409)
        api.call("deleteGroup", group="billing", expect=409)
    finally:
        consumer.close()
    offsets = api.json("describeGroupOffsets", group="billing")
    assert offsets["total_lag"] == 15
    preview = api.json("resetGroupOffsets", group="billing", json={"to": "earliest", "dry_run": True})
    assert preview["offsets"][0]["committed_offset"] == 0 and preview["total_lag"] == 20
    assert api.json("describeGroupOffsets", group="billing")["total_lag"] == 15  # a dry run commits nothing
    api.json("resetGroupOffsets", group="billing", json={"to": "offset", "offset": 12})
    assert api.json("describeGroupOffsets", group="billing")["offsets"][0]["committed_offset"] == 12
    api.json("resetGroupOffsets", group="billing", json={"to": "latest", "topic": "payments"})
    assert api.json("describeGroupOffsets", group="billing")["total_lag"] == 0
    reset = api.json("resetGroupOffsets", group="billing", json={"to": "timestamp", "timestamp_ms": 0})
    assert reset["offsets"][0]["committed_offset"] == 0
    api.call("resetGroupOffsets", group="billing", json={"to": "offset"}, expect=400)
    api.call("resetGroupOffsets", group="billing", json={"to": "sideways"}, expect=400)
    api.call("deleteGroup", group="billing", expect=204)
    api.call("describeGroup", group="billing", expect=404)


def test_users_and_acls(api: AdminApi, broker: BrokerProcess) -> None:
    assert api.json("listUsers") == []
    assert api.json("createUser", json={"name": "alice", "password": "s3cret"}) == {"name": "alice"}
    api.call("createUser", json={"name": "alice", "password": "again"}, expect=409)
    api.call("changePassword", name="alice", json={"password": "n3w"}, expect=204)
    api.call("changePassword", name="nobody", json={"password": "x"}, expect=404)
    assert api.json("listUsers") == [{"name": "alice"}]
    api.call("deleteUser", name="alice", expect=204)
    api.call("deleteUser", name="alice", expect=404)

    acl = {"principal": "User:alice", "host": "*", "resource_type": "topic", "resource_name": "orders",
           "pattern_type": "prefixed", "operation": "read", "permission": "allow"}
    assert api.json("createAcls", json={"acls": [acl]}) == {"acls": [acl]}
    assert acl in api.json("listAcls")
    api.call("createAcls", json={"acls": [{**acl, "operation": "fly"}]}, expect=400)
    api.call("deleteAcl", params=acl, expect=204)
    assert acl not in api.json("listAcls")
    api.call("deleteAcl", params=acl, expect=404)
    api.call("deleteAcl", params={"principal": "User:alice"}, expect=400)

    fleet = {**acl, "principal": "User:*", "resource_type": "mqtt_topic", "resource_name": "devices/%c/#",
             "pattern_type": "literal", "operation": "all"}
    assert api.json("createAcls", json={"acls": [fleet]}) == {"acls": [fleet]}
    assert fleet in api.json("listAcls")
    prefixed = api.call("createAcls", json={"acls": [{**fleet, "pattern_type": "prefixed"}]}, expect=400)
    assert "not a prefix" in prefixed.json()["error"]["message"]
    api.call("createAcls", json={"acls": [{**fleet, "operation": "delete"}]}, expect=400)
    api.call("createAcls", json={"acls": [{**fleet, "resource_name": "devices/#/x"}]}, expect=400)
    api.call("deleteAcl", params=fleet, expect=204)
    assert fleet not in api.json("listAcls")
    log = broker.log_text()
    assert "ADMIN POST /api/v1/users principal=User:ANONYMOUS host=127.0.0.1 status=201" in log
    assert "s3cret" not in log and "n3w" not in log


def test_internal_topics_are_shown_and_refused_to_clients(api: AdminApi, broker: BrokerProcess) -> None:
    """The API acts as a client (here the anonymous principal, not a super user): it may describe the broker's
    internal topics but not create, delete, alter or grow one, nor delete its records; nothing changes."""
    described = api.json("describeTopic", topic="__consumer_offsets")
    assert described["internal"] is True and described["partitions"]
    created = api.call("createTopic", json={"name": "__mine"}, expect=400)
    assert created.json()["error"]["code"] == "INVALID_TOPIC_EXCEPTION" and "is internal" in created.text
    refused = [
        api.call("deleteTopic", topic="__mqtt_sessions", expect=403),
        api.call("alterTopicConfigs", topic="__mqtt_sessions", json={"set": {"retention.ms": "1"}}, expect=403),
        api.call("addPartitions", topic="__consumer_offsets", json={"count": 99}, expect=403),
        api.call("deleteRecords", topic="__consumer_offsets", partition=0, expect=403),
    ]
    assert all(answer.json()["error"]["code"] == "TOPIC_AUTHORIZATION_FAILED" for answer in refused)
    assert api.json("describeTopic", topic="__consumer_offsets")["partitions"] == described["partitions"]
    assert "__mine" not in [t["name"] for t in api.json("listTopics", params={"internal": "true"})]
    assert api.json("describeTopicConfigs", topic="__mqtt_sessions").get("retention.ms") != "1"
    assert "DELETE /api/v1/topics/__mqtt_sessions principal=User:ANONYMOUS host=127.0.0.1 status=403" in \
        broker.log_text()


def test_the_message_browser_passes_over_a_batch_that_does_not_decode(api: AdminApi, broker: BrokerProcess) -> None:
    """A batch whose CRC is right and records garbage (the log takes it on a topic without record validation) is
    listed under ``unreadable`` with its offsets; the records around it are shown and paging goes past it."""
    api.json("createTopic", json={"name": "half-poisoned", "partitions": 1})
    _produce(broker, "half-poisoned", [b"before-0", b"before-1"])
    assert produce_batch(broker.ports["native"], "half-poisoned", 0, poison_batch()) == 0
    _produce(broker, "half-poisoned", [b"after-3"])

    page = api.json("browseRecords", topic="half-poisoned", params={"partition": 0, "offset": 0})
    assert [(r["offset"], r["value"]["text"]) for r in page["records"]] == [(0, "before-0"), (1, "before-1"),
                                                                              (3, "after-3")]
    [unreadable] = page["unreadable"]
    assert (unreadable["partition"], unreadable["first_offset"], unreadable["last_offset"]) == (0, 2, 2)
    assert unreadable["error"] and page["next_offsets"] == {"0": 4}
    alone = api.json("browseRecords", topic="half-poisoned", params={"partition": 0, "offset": 2, "limit": 1})
    assert [r["offset"] for r in alone["records"]] == [3] and alone["next_offsets"] == {"0": 4}
    before_it = api.json("browseRecords", topic="half-poisoned", params={"partition": 0, "offset": 0, "limit": 2})
    assert [r["offset"] for r in before_it["records"]] == [0, 1] and before_it["unreadable"] == []
    api.call("deleteTopic", topic="half-poisoned", expect=204)


def test_mqtt_clients_sessions_and_retained_messages(api: AdminApi, broker: MqttBroker) -> None:
    client = MqttClient(broker, "sensor-42", version=mqtt.MQTTv5, clean=False, session_expiry_s=3600)
    try:
        client.subscribe("commands/sensor-42/#", qos=1)
        client.publish("status/sensor-42", b'{"online": true}', qos=1, retain=True)
        (connected,) = [c for c in api.json("listMqttClients") if c["client_id"] == "sensor-42"]
        assert connected["protocol_level"] == 5 and connected["peer"].startswith("127.0.0.1:")
        assert connected["subscriptions"] == [{"topic_filter": "commands/sensor-42/#", "qos": 1, "share_group": None,
                                               "no_local": False}]
        retained = wait_for(lambda: api.json("listMqttRetained", params={"filter": "status/#"}), 20)
        assert retained[0]["topic"] == "status/sensor-42" and retained[0]["payload"]["text"] == '{"online": true}'
        api.call("deleteMqttSession", client_id="sensor-42", expect=409)
    finally:
        client.paho.disconnect()
        client.paho.loop_stop()
    stored = wait_for(lambda: [s for s in api.json("listMqttSessions")
                                 if s["client_id"] == "sensor-42" and not s["connected"]], 20)
    assert stored[0]["expiry_interval_s"] == 3600 and stored[0]["subscriptions"][0]["qos"] == 1
    api.call("deleteMqttSession", client_id="sensor-42", expect=204)
    assert not [s for s in api.json("listMqttSessions") if s["client_id"] == "sensor-42"]
    api.call("deleteMqttSession", client_id="sensor-42", expect=404)
    api.call("clearMqttRetained", params={"topic": "status/sensor-42"}, expect=204)
    assert api.json("listMqttRetained", params={"filter": "status/#", "limit": 10}) == []
    api.call("clearMqttRetained", params={"topic": "status/sensor-42"}, expect=404)
    api.call("clearMqttRetained", expect=400)


def test_mqtt_mapping_rules_are_changed_at_run_time_and_hostile_ones_refused(api: AdminApi, broker: MqttBroker) -> None:
    assert api.json("getMqttMappingRules") == {"rules": [], "default_log_topic": "mqtt.messages", "source": "configuration"}
    hostile = {
        "a/#/b": "'#' must be a whole last level", "$share/g/a": "shared subscription", "ok/#": "internal",
    }
    for mqtt_filter, complaint in hostile.items():
        log_topic = "__consumer_offsets" if complaint == "internal" else "mqtt.alarms"
        refused = api.call("replaceMqttMappingRules", json={"rules": [{"filter": mqtt_filter, "log_topic": log_topic}]},
                           expect=400)
        assert complaint in refused.json()["error"]["message"], refused.json()
    too_many = [{"filter": f"f/{index}", "log_topic": "mqtt.many"} for index in range(257)]
    api.call("replaceMqttMappingRules", json={"rules": too_many}, expect=400)
    api.call("replaceMqttMappingRules", json={"rules": [{"filter": "a", "log_topic": "bad name"}]}, expect=400)
    api.call("replaceMqttMappingRules", json={"rules": [{"filter": "a", "log_topic": "t"}] * 2}, expect=400)
    assert api.json("getMqttMappingRules")["source"] == "configuration", "nothing refused was stored"
    rules = [{"filter": "plant/+/alarms", "log_topic": "mqtt.alarms"}]
    answer = api.json("replaceMqttMappingRules", json={"rules": rules})
    assert answer == {"rules": rules, "default_log_topic": "mqtt.messages", "source": "cluster"}
    publisher = MqttClient(broker, "plant-7")
    publisher.publish("plant/7/alarms", b"overheated", qos=1)
    publisher.disconnect()
    with Consumer(broker.bootstrap, group_id=None, topics=["mqtt.alarms"], auto_offset_reset="earliest") as consumer:
        found = wait_for(lambda: [(r.key, r.value) for r in consumer.poll(timeout=1.0)], 20)
    assert found == [(b"plant/7/alarms", b"overheated")]
    reset = api.json("resetMqttMappingRules")
    assert reset == {"rules": [], "default_log_topic": "mqtt.messages", "source": "configuration"}


def test_amqp_exchanges_queues_and_bindings(api: AdminApi, broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"]))
    try:
        channel = connection.channel()
        channel.exchange_declare("telemetry", exchange_type="topic", durable=True)
        channel.queue_declare("alerts", durable=True)
        channel.queue_bind("alerts", "telemetry", routing_key="sensor.*.alert")
        channel.confirm_delivery()
        channel.basic_publish("telemetry", "sensor.7.alert", b"hot")
        assert {"name": "telemetry", "type": "topic", "durable": True, "auto_delete": False,
                "internal": False} in api.json("listAmqpExchanges")
        (queue,) = [q for q in api.json("listAmqpQueues") if q["name"] == "alerts"]
        assert queue["type"] == "share" and queue["messages"] == 1 and queue["consumers"] == 0
        assert {"source": "telemetry", "destination": "alerts", "destination_type": "queue",
                "routing_key": "sensor.*.alert"} in api.json("listAmqpBindings")
        api.call("deleteAmqpQueue", queue="alerts", params={"if_empty": "true"}, expect=409)
        channel.basic_consume("alerts", lambda *args: None)
        api.call("deleteAmqpQueue", queue="alerts", params={"if_unused": "true"}, expect=409)
    finally:
        connection.close()
    api.call("deleteAmqpQueue", queue="alerts", expect=204)
    assert "alerts" not in [q["name"] for q in api.json("listAmqpQueues")]
    api.call("deleteAmqpQueue", queue="alerts", expect=404)


def test_http_level_errors_are_json_and_mutating_refusals_are_audited(api: AdminApi, broker: BrokerProcess) -> None:
    base = api.base_url
    missing = requests.get(f"{base}/api/v1/nothing-here", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    wrong_method = requests.put(f"{base}/api/v1/topics", json={}, timeout=10)
    assert wrong_method.status_code == 405 and "GET, POST" in wrong_method.json()["error"]["message"]
    form = requests.post(f"{base}/api/v1/topics", data={"name": "from-a-form"}, timeout=10)
    assert form.status_code == 415  # a cross-site form cannot send JSON
    garbage = requests.post(f"{base}/api/v1/topics", data=b"{not json", headers={"content-type": "application/json"},
                            timeout=10)
    assert garbage.status_code == 400 and garbage.json()["error"]["code"] == "INVALID_JSON"
    huge = requests.post(f"{base}/api/v1/topics", data=b"[" + b"1," * 600_000 + b"1]",
                         headers={"content-type": "application/json"}, timeout=30)
    assert huge.status_code == 413
    assert "ADMIN POST /api/v1/topics principal=User:ANONYMOUS host=127.0.0.1 status=415" in broker.log_text()
    assert requests.get(f"{base}/health", timeout=10).status_code == 200  # still serving


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """ACL authorizer, no anonymous access, super user admin; basic auth allowed over plain HTTP."""
    for broker in start_secured_broker(tmp_path_factory.mktemp("admin-api-secured"),
                                       extra_args=("--set", "security.plain_without_tls=true")):
        yield broker.process


def test_with_security_on_the_api_acts_as_the_authenticated_principal(secured: BrokerProcess) -> None:
    base = f"http://127.0.0.1:{secured.ports['http']}"
    assert requests.get(f"{base}/api/v1/topics", timeout=10).status_code == 401
    assert requests.get(f"{base}/", timeout=10).status_code == 401  # the console too
    admin = AdminApi(base, auth=("admin", "admin-secret"))
    admin.call("createAcls", json={"acls": [{"principal": "User:alice", "host": "*", "resource_type": "cluster",
                                             "resource_name": "kafka-cluster", "pattern_type": "literal",
                                             "operation": "describe", "permission": "allow"}]}, expect=201)
    alice = AdminApi(base, auth=("alice", "alice-secret"))
    refused = alice.call("createTopic", json={"name": "alice-topic"}, expect=403)
    assert refused.json()["error"]["code"] == "TOPIC_AUTHORIZATION_FAILED"
    alice.call("createUser", json={"name": "mallory", "password": "x"}, expect=403)
    alice.call("listMqttSessions", expect=200)
    alice.call("deleteMqttSession", client_id="anyone", expect=403)
    admin.call("createTopic", json={"name": "admin-topic"}, expect=201)
    fleet = [{"principal": "User:*", "host": "*", "resource_type": resource_type, "resource_name": name,
              "pattern_type": "literal", "operation": "all", "permission": "allow"}
             for resource_type, name in (("mqtt_topic", "devices/%c/#"), ("topic", "mqtt.messages"))]
    admin.call("createAcls", json={"acls": fleet}, expect=201)
    assert _alice_subscribes(secured, "dev-1", ["devices/dev-1/#", "devices/dev-2/#"]) == [1, 0x87]
    for rule in fleet:
        admin.call("deleteAcl", params=rule, expect=204)
    log = secured.log_text()
    assert "ADMIN POST /api/v1/topics principal=User:alice" in log and "status=403" in log
    assert "ADMIN POST /api/v1/topics principal=User:admin" in log


def _alice_subscribes(broker: BrokerProcess, client_id: str, filters: list[str]) -> list[int]:
    """The SUBACK reason codes (MQTT 5) alice's device ``client_id`` gets for ``filters``, at QoS 1."""
    answers: queue.Queue[Any] = queue.Queue()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    client.username_pw_set("alice", "alice-secret")
    client.on_connect = lambda client, userdata, flags, reason, properties: answers.put(reason)
    client.on_subscribe = lambda client, userdata, mid, reasons, properties: answers.put(reasons)
    client.connect("127.0.0.1", broker.ports["mqtt"])
    client.loop_start()
    try:
        assert not answers.get(timeout=10).is_failure
        client.subscribe([(topic_filter, 1) for topic_filter in filters])
        return [int(code.value) for code in answers.get(timeout=10)]
    finally:
        client.disconnect()
        client.loop_stop()


def test_every_route_in_the_document_is_exercised(api: AdminApi) -> None:
    """Walks the OpenAPI document: each operation must have answered a success to one of the tests above (those
    of share groups, subscriptions and connectors: to ``test_admin_api_queues.py``)."""
    documented = set(api.operations) - operations_tagged(api, QUEUE_TAGS)
    missing = documented - api.succeeded
    assert not missing, f"routes no test exercised (run the whole module): {sorted(missing)}"
