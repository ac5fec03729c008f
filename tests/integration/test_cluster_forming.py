"""A broker that starts before its cluster has formed: its MQTT and AMQP front ends cannot replay their
internal topics yet. Clients that connect meanwhile wait, are served once the cluster forms, and
``/ready`` says "not ready" until the front ends serve."""

from __future__ import annotations

import os
import pathlib
import queue
import signal
import threading
import time

import paho.mqtt.client as mqtt
import pika
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.integration.clusterprocess import cluster_brokers, wait_for


@pytest.mark.alone  # the cluster must form within the 5 s a client may wait: no other test's load meanwhile
def test_clients_connecting_before_the_quorum_forms_are_served_once_it_has(tmp_path: pathlib.Path) -> None:
    brokers = cluster_brokers(tmp_path)
    first, others = brokers[0], brokers[1:]
    try:
        # The other voters boot one at a time and are frozen, so no two of them form a quorum; on SIGCONT
        # the cluster forms at once (internal topics need all 3 brokers: their replication factor).
        for other in others:
            threading.Thread(target=other.start, kwargs={"timeout_s": 90}, daemon=True).start()
            wait_for(lambda: other.listening("http"), what="the http listener")
            assert other.process is not None
            os.kill(other.process.pid, signal.SIGSTOP)
        threading.Thread(target=first.start, kwargs={"timeout_s": 90}, daemon=True).start()
        wait_for(lambda: all(first.listening(name) for name in ("mqtt", "amqp", "http")), what="the listeners")

        connacks: queue.Queue[str] = queue.Queue()
        device = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="early-device", protocol=mqtt.MQTTv5)
        device.on_connect = lambda client, userdata, flags, code, properties: connacks.put(str(code))
        device.connect("127.0.0.1", first.ports["mqtt"])
        device.loop_start()
        amqp_opened: queue.Queue[object] = queue.Queue()

        def open_amqp() -> None:
            try:
                connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", first.ports["amqp"]))
                amqp_opened.put(connection.is_open)
                connection.close()
            except Exception as error:  # handed to the test thread through the queue
                amqp_opened.put(error)

        threading.Thread(target=open_amqp, daemon=True).start()
        time.sleep(1)  # well under the 5 s a client may wait for its front end
        assert connacks.empty(), "a CONNACK came before the front end could have replayed its state"
        assert amqp_opened.empty()
        assert not first.is_ready()

        for other in others:
            os.kill(other.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
        assert connacks.get(timeout=30) == "Success"
        assert amqp_opened.get(timeout=30) is True
        wait_for(first.is_ready, what="/ready of the first broker")
        device.loop_stop()
        device.disconnect()
    finally:
        for broker in brokers:
            if broker.process is not None and broker.process.poll() is None:
                os.kill(broker.process.pid, signal.SIGCONT)
            broker.kill()
