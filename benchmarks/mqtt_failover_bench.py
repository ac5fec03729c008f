"""MQTT failover on a three-broker loopback cluster (default settings, paho-mqtt 3.1.1, QoS 1).

Each round: a persistent subscriber (``clean_session=False``, ``fleet/#``) and a publisher are
connected to the same broker, which is then killed with SIGKILL. The publisher reconnects to one
survivor at once; we time from the kill to its first PUBACK; then the subscriber reconnects to the
other survivor and we time from the kill to its CONNACK and to the first message it gets (the publish-and-reconnect
sequence is serial, so this includes the publisher's recovery); we check that every
message acknowledged before and after the kill reaches the subscriber. The killed broker is
restarted before the next round. Targets: both times ≤ 5 s, 0 acknowledged messages lost.

Run: ``python benchmarks/mqtt_failover_bench.py [--kills 5] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.integration.brokerprocess import BrokerProcess  # noqa: E402
from tests.integration.clusterprocess import start_cluster  # noqa: E402
from tests.integration.mqtt_support import Client  # noqa: E402
from tests.integration.test_cluster_frontends import _until_delivered  # noqa: E402

BEFORE, AFTER = 50, 50


def _connect(broker: BrokerProcess, client_id: str = "", deadline_s: float = 30.0, **options: object) -> Client:
    """A client connected to ``broker``, retrying while it refuses or is not listening yet."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            client = Client(SimpleNamespace(mqtt_port=broker.ports["mqtt"]), client_id, **options)
            if client.connack_result[1] == 0:
                return client
            client.disconnect()
        except Exception:  # refused or timed out: the cluster is still failing over
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def _first_puback(publisher: Client, topic: str, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while True:
        info = publisher.paho.publish(topic, b"after 0", qos=1)
        info.wait_for_publish(timeout=1.0)
        if info.is_published():
            return
        assert time.monotonic() < deadline, "no PUBACK after the kill"


def one_round(cluster: list[BrokerProcess], victim: int, round_number: int) -> dict[str, float]:
    """Kill broker ``victim`` under a publisher and a subscriber; the recovery times in seconds."""
    survivors = [broker for index, broker in enumerate(cluster) if index != victim]
    client_id, prefix = f"bench-sub-{round_number}", f"fleet{round_number}"
    subscriber = _connect(cluster[victim], client_id, clean=False)
    subscriber.subscribe(f"{prefix}/#", qos=1)
    publisher = _connect(cluster[victim])
    _until_delivered(publisher, subscriber, f"{prefix}/probe")  # the subscription is live end to end
    for index in range(BEFORE):
        publisher.publish(f"{prefix}/t", b"before %d" % index, qos=1)
    before = [m.payload for m in subscriber.receive(BEFORE, timeout_s=30)]
    assert before == [b"before %d" % index for index in range(BEFORE)], f"round {round_number}: {before}"
    subscriber.paho.loop_stop()
    publisher.paho.loop_stop()
    killed_at = time.monotonic()
    cluster[victim].kill()
    publisher = _connect(survivors[0])
    _first_puback(publisher, f"{prefix}/t")
    puback_s = time.monotonic() - killed_at
    subscriber = _connect(survivors[1], client_id, clean=False)
    connack_s = time.monotonic() - killed_at
    first = subscriber.receive(1, timeout_s=30)
    delivery_s = time.monotonic() - killed_at
    for index in range(1, AFTER):
        publisher.publish(f"{prefix}/t", b"after %d" % index, qos=1)
    expected = {b"after %d" % index for index in range(AFTER)}
    received = {m.payload for m in first}
    deadline = time.monotonic() + 30
    while not expected <= received and time.monotonic() < deadline:  # redelivered "before" ones may come too
        received |= {m.payload for m in subscriber.receive(1, timeout_s=1)}
    lost = expected - received
    publisher.disconnect()
    subscriber.disconnect()
    cluster[victim].restart()
    return {"puback_s": puback_s, "connack_s": connack_s, "delivery_s": delivery_s, "lost": float(len(lost))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mqtt-failover-") as root:
        cluster = start_cluster(pathlib.Path(root))
        try:
            rounds = [one_round(cluster, index % 3, index) for index in range(arguments.kills)]
        finally:
            for broker in cluster:
                broker.kill()
    summary = {
        "kills": arguments.kills,
        "puback_s_p50": statistics.median(r["puback_s"] for r in rounds),
        "puback_s_max": max(r["puback_s"] for r in rounds),
        "subscriber_connack_s_p50": statistics.median(r["connack_s"] for r in rounds),
        "subscriber_connack_s_max": max(r["connack_s"] for r in rounds),
        "delivery_s_p50": statistics.median(r["delivery_s"] for r in rounds),
        "delivery_s_max": max(r["delivery_s"] for r in rounds),
        "acknowledged_lost": int(sum(r["lost"] for r in rounds)),
        "puback_s_per_round": [round(r["puback_s"], 2) for r in rounds],
        "delivery_s_per_round": [round(r["delivery_s"], 2) for r in rounds],
    }
    print(json.dumps(summary) if arguments.json else "\n".join(f"{key}: {value:.2f}" if isinstance(value, float)
                                                                else f"{key}: {value}" for key, value in summary.items()))


if __name__ == "__main__":
    main()
