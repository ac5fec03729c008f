"""The admin API's share groups, push subscriptions and connectors against a real broker, with real clients:
a share consumer holding leases, an HTTP endpoint receiving pushes, a redis-server behind a sink connector.

Every answer is checked against the document; the last test fails for any route of these sections
that no test exercised (``test_admin_api.py`` walks the others).
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from mqbroker.client import Admin, ShareConsumer
from mqbroker.shares.push.signing import verify
from tests.integration.admin_api_support import QUEUE_TAGS, AdminApi, operations_tagged
from tests.integration.brokerprocess import BrokerProcess, running
from tests.integration.clusterprocess import wait_for
from tests.integration.connector_support import connector_broker, produce
from tests.integration.redisprocess import RedisProcess, running_redis
from tests.integration.security_support import start_secured_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The embedded default broker; connector tasks report their status twice a second."""
    yield from running(connector_broker(tmp_path_factory.mktemp("admin-api-queues") / "data"))


@pytest.fixture(scope="module")
def api(broker: BrokerProcess) -> AdminApi:
    """The API client of the module: it remembers which operations answered a success."""
    return AdminApi(f"http://127.0.0.1:{broker.ports['http']}")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    yield from running_redis(tmp_path_factory.mktemp("admin-api-redis"))


class _Endpoint(http.server.BaseHTTPRequestHandler):
    """Answers every POST with 200 and keeps its headers and body."""

    received: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        self.received.append(({name.lower(): value for name, value in self.headers.items()}, body))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *arguments: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def endpoint() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A real HTTP server the broker pushes to: its URL and what it received."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", _Endpoint.received
    finally:
        server.shutdown()


def test_index_lists_share_groups_subscriptions_and_connectors_as_present(api: AdminApi) -> None:
    present = {section["name"]: section["present"] for section in api.json("getIndex")["sections"]}
    assert present["share groups"] and present["push subscriptions"] and present["connectors"]


def test_share_group_members_in_flight_delivery_counts_and_dead_letters(api: AdminApi, broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["jobs", "jobs-dlq"], partitions=2)
    created = api.json("createShareGroup", json={"group_id": "workers", "topics": ["jobs"], "configs": {
        "auto.offset.reset": "earliest", "dead.letter.topic": "jobs-dlq", "max.delivery.attempts": "3"}})
    assert created["group_id"] == "workers" and created["members"] == [] and created["push_endpoint"] is None
    api.call("createShareGroup", json={"group_id": "workers", "topics": ["jobs"]}, expect=409)
    internal = api.call("createShareGroup", json={"group_id": "spy", "topics": ["__consumer_offsets"]}, expect=400)
    assert internal.json()["error"]["code"] == "INVALID_TOPIC_EXCEPTION"
    produce(broker.bootstrap, "jobs", [(b"k%d" % n, b"job-%d" % n) for n in range(10)])

    consumer = ShareConsumer(broker.bootstrap, group_id="workers", topics=["jobs"], client_id="worker-1",
                             records_max=4, fetch_wait_ms=200)
    try:
        held = wait_for(lambda: consumer.poll(1.0), 20)
        consumer.reject(held[0], "poison")
        consumer.commit()
        described = wait_for(lambda: (found := api.json("describeShareGroup", group="workers"))
                             ["in_flight"] == len(held) - 1 and found["dead_lettered"] == 1 and found, 20)
        (member,) = described["members"]
        assert member["client_id"] == "worker-1" and member["topics"] == ["jobs"]
        assert member["acquired"] == len(held) - 1
        assert sum(p["delivery_counts"].get("1", 0) for p in described["partitions"]) == len(held) - 1
        assert described["lag"] == 10 - 1 and described["configs"]["dead.letter.topic"] == "jobs-dlq"
        assert wait_for(lambda: api.json("describeShareGroup", group="workers")["dead_letter_depth"] == 1, 20)
        listed = {group["group_id"]: group for group in api.json("listShareGroups")}
        assert listed["workers"] == {"group_id": "workers", "topics": ["jobs"], "members": 1, "push_endpoint": None}
        refused = api.call("deleteShareGroup", group="workers", expect=409)
        assert refused.json()["error"]["code"] == "NON_EMPTY_GROUP"
    finally:
        consumer.close()
    wait_for(lambda: api.call("deleteShareGroup", group="workers").status_code == 204, timeout_s=60)
    assert "workers" not in [group["group_id"] for group in api.json("listShareGroups")]
    assert api.call("describeShareGroup", group="workers", expect=404).json()["error"]["code"] == "GROUP_ID_NOT_FOUND"


def test_a_push_subscription_created_through_the_api_pushes_signed_records(
        api: AdminApi, broker: BrokerProcess, endpoint: tuple[str, list[tuple[dict[str, str], bytes]]]) -> None:
    url, received = endpoint
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["payments"])
    created = api.json("createSubscription", json={"name": "payments-hook", "topic": "payments", "endpoint": url,
                                                   "start": "earliest", "max_outstanding": 4})
    assert created["endpoint"] == url and len(created["secret"]) == 64  # 32 random bytes, hexadecimal
    produce(broker.bootstrap, "payments", [(None, b"paid-%d" % n) for n in range(3)])
    wait_for(lambda: len(received) >= 3, 20)
    assert sorted(body for _, body in received)[:3] == [b"paid-0", b"paid-1", b"paid-2"]
    assert all(headers["x-mq-subscription"] == "payments-hook"
               and verify(created["secret"], headers["x-mq-timestamp"], body, headers["x-mq-signature"])
               for headers, body in received)  # signed with the secret the API answered
    assert api.json("listSubscriptions") == [{"name": "payments-hook", "topics": ["payments"], "endpoint": url}]
    described = api.json("describeSubscription", name="payments-hook")
    assert described["push_endpoint"] == url and described["configs"]["push.secret"] != created["secret"]
    assert wait_for(lambda: api.json("describeSubscription", name="payments-hook")["lag"] == 0, 20)

    api.json("createShareGroup", json={"group_id": "plain", "topics": ["payments"]})
    assert api.call("describeSubscription", name="plain", expect=404).json()["error"]["code"] == "RESOURCE_NOT_FOUND"
    api.call("deleteSubscription", name="plain", expect=404)  # a plain share group is not deleted through here
    api.call("deleteShareGroup", group="plain", expect=204)
    bad = api.call("createSubscription", json={"name": "bad", "topic": "payments", "endpoint": url,
                                               "filter": "price > 3"}, expect=400)
    assert bad.json()["error"]["code"] == "INVALID_CONFIG"
    api.call("deleteSubscription", name="payments-hook", expect=204)
    assert api.json("listSubscriptions") == []


def test_a_redis_sink_connector_created_paused_resumed_and_deleted(
        api: AdminApi, broker: BrokerProcess, redis_server: RedisProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["telemetry"], partitions=2)
    produce(broker.bootstrap, "telemetry", [(b"d%d" % n, b"%d" % n) for n in range(50)])
    config = {"type": "redis-sink", "topics": "telemetry", "redis.url": redis_server.url(0),
              "redis.stream": "telemetry-stream"}
    created = api.json("createConnector", json={"name": "to-redis", "config": config})
    assert created["state"] == "running" and created["config"]["redis.url"] == redis_server.url(0)
    api.call("createConnector", json={"name": "to-redis", "config": config}, expect=409)
    wait_for(lambda: redis_server.client(0).xlen("telemetry-stream") == 50, 20)
    running = wait_for(lambda: (found := api.json("describeConnector", name="to-redis"))["tasks"][0]["state"]
                       == "running" and found["tasks"][0]["records_total"] == 50 and found, 20)
    assert running["lag_records"] == 0 and running["tasks"][0]["owner"] == 1
    (summary,) = api.json("listConnectors")
    assert summary == {"name": "to-redis", "type": "redis-sink", "state": "running", "tasks": 1, "running_tasks": 1,
                       "failed_tasks": 0, "lag_records": 0, "lag_seconds": 0.0, "errors_total": 0}

    assert api.json("setConnectorState", name="to-redis", json={"state": "paused"})["state"] == "paused"
    wait_for(lambda: api.json("describeConnector", name="to-redis")["tasks"][0]["state"] == "paused", 20)
    produce(broker.bootstrap, "telemetry", [(b"late", b"late")])
    time.sleep(1.5)  # three status intervals: a running task would have copied it by now
    assert redis_server.client(0).xlen("telemetry-stream") == 50  # paused: nothing copied
    api.json("setConnectorState", name="to-redis", json={"state": "running"})
    wait_for(lambda: redis_server.client(0).xlen("telemetry-stream") == 51, 20)
    api.call("deleteConnector", name="to-redis", expect=204)
    assert api.json("listConnectors") == []
    api.call("describeConnector", name="to-redis", expect=404)
    api.call("setConnectorState", name="to-redis", json={"state": "paused"}, expect=404)


def test_hostile_input_gets_a_clear_4xx_and_the_broker_keeps_serving(api: AdminApi, broker: BrokerProcess) -> None:
    base = api.base_url
    odd = api.call("describeConnector", name="a/b", expect=400)  # percent-encoded: a name may not hold '/'
    assert odd.json()["error"]["code"] == "INVALID_REQUEST" and "name" in odd.json()["error"]["message"]
    api.call("describeShareGroup", group="tab\there", expect=400)
    api.call("createShareGroup", json={"group_id": "x" * 256, "topics": ["jobs"]}, expect=400)
    api.call("createShareGroup", json={"group_id": "no-topics", "topics": []}, expect=400)
    api.call("createConnector", json={"name": "../etc", "config": {"type": "redis-sink"}}, expect=400)
    unknown = api.call("createConnector", json={"name": "odd", "config": {"type": "ftp-sink"}}, expect=400)
    assert unknown.json()["error"]["code"] == "INVALID_CONFIG"
    api.call("createSubscription", json={"name": "s", "topic": "t", "endpoint": "file:///etc/passwd"}, expect=400)
    api.call("createSubscription", json={"name": "s", "topic": "t", "endpoint": "http://h", "max_outstanding": 0},
             expect=400)
    api.call("setConnectorState", name="odd", json={"state": "stopped"}, expect=400)
    for path in ("/api/v1/share-groups", "/api/v1/subscriptions", "/api/v1/connectors"):
        garbage = requests.post(base + path, data=b'{"name": ', headers={"content-type": "application/json"},
                                timeout=10)
        assert garbage.status_code == 400 and garbage.json()["error"]["code"] == "INVALID_JSON"
        huge = requests.post(base + path, data=b'{"config": {' + b'"k": "v",' * 200_000 + b'"k": "v"}}',
                             headers={"content-type": "application/json"}, timeout=30)
        assert huge.status_code == 413
        assert requests.post(base + path, data=b"name=x", timeout=10).status_code == 415
    assert "ADMIN POST /api/v1/connectors principal=User:ANONYMOUS host=127.0.0.1 status=413" in broker.log_text()
    assert requests.get(f"{base}/health", timeout=10).status_code == 200


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """ACL authorizer, no anonymous access, super user admin; basic auth allowed over plain HTTP."""
    for broker in start_secured_broker(tmp_path_factory.mktemp("admin-api-queues-secured"),
                                       extra_args=("--set", "security.plain_without_tls=true")):
        yield broker.process


def test_with_acls_each_call_is_authorized_for_the_caller(secured: BrokerProcess) -> None:
    base = f"http://127.0.0.1:{secured.ports['http']}"
    assert requests.get(f"{base}/api/v1/share-groups", timeout=10).status_code == 401
    admin = AdminApi(base, auth=("admin", "admin-secret"))
    admin.call("createAcls", json={"acls": [{"principal": "User:alice", "host": "*", "resource_type": "cluster",
                                             "resource_name": "kafka-cluster", "pattern_type": "literal",
                                             "operation": "describe", "permission": "allow"}]}, expect=201)
    admin.call("createTopic", json={"name": "secured-jobs"}, expect=201)
    admin.call("createShareGroup", json={"group_id": "admins-queue", "topics": ["secured-jobs"]}, expect=201)
    alice = AdminApi(base, auth=("alice", "alice-secret"))
    assert alice.json("listShareGroups") == []  # alice may not describe the group: it is not listed
    assert [g["group_id"] for g in admin.json("listShareGroups")] == ["admins-queue"]
    assert alice.call("describeShareGroup", group="admins-queue", expect=403).json()["error"]["code"] == \
        "GROUP_AUTHORIZATION_FAILED"
    alice.call("createShareGroup", json={"group_id": "alices", "topics": ["secured-jobs"]}, expect=403)
    alice.call("deleteShareGroup", group="admins-queue", expect=403)
    alice.call("createSubscription", json={"name": "alices-hook", "topic": "secured-jobs",
                                           "endpoint": "http://127.0.0.1:9/"}, expect=403)
    assert alice.json("listConnectors") == []  # describe on the cluster is enough to read
    refused = alice.call("createConnector", json={"name": "alices", "config": {"type": "redis-sink"}}, expect=403)
    assert refused.json()["error"]["code"] == "CLUSTER_AUTHORIZATION_FAILED"
    assert "ADMIN POST /api/v1/connectors principal=User:alice host=127.0.0.1 status=403" in secured.log_text()
    admin.call("deleteShareGroup", group="admins-queue", expect=204)


def test_every_route_of_these_sections_is_exercised(api: AdminApi) -> None:
    """Walks the document's share-group, subscription and connector operations: each must have succeeded above."""
    missing = operations_tagged(api, QUEUE_TAGS) - api.succeeded
    assert not missing, f"routes no test exercised (run the whole module): {sorted(missing)}"
