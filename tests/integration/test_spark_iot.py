"""The IoT pipeline end to end over real MQTT: paho devices -> broker -> Spark (local, then a standalone cluster) -> paho subscriber.

Both runs start the job at ``latest`` (its default) on a topic that already holds records, so
they also check that a stream starting at the end of a log reads what arrives after it.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import paho.mqtt.client as mqtt
import pytest
from pyspark.sql import SparkSession

from mqbroker_spark.jobs import iot_aggregates
from tests.integration.brokerprocess import free_port
from tests.integration.mqtt_support import Client, MqttBroker
from tests.integration.spark_support import spark, spark_broker  # noqa: F401 (fixtures)

SPARK_CLASS = str(pathlib.Path(__import__("pyspark").__file__).parent / "bin" / "spark-class")

Reading = tuple[str, int, float]
Result = tuple[str, dict]


class Subscriber:
    """A paho MQTT 5 client subscribed to ``devices/+/alerts`` and ``aggregates/#``."""

    def __init__(self, broker: MqttBroker, client_id: str) -> None:
        self.client = Client(broker, client_id, version=mqtt.MQTTv5)
        for topic_filter in ("devices/+/alerts", "aggregates/#"):
            self.client.subscribe(topic_filter, qos=1)
        self.results: list[Result] = []

    def collect_until(self, done: Callable[[list[Result]], bool], timeout_s: float) -> list[Result]:
        """Everything received so far, waiting until ``done(results)`` holds or the time is up."""
        deadline = time.monotonic() + timeout_s
        while not done(self.results) and time.monotonic() < deadline:
            self.results += [(message.topic, json.loads(message.payload)) for message in self.client.receive(1, 0.2)]
        return self.results

    def close(self) -> None:
        """Disconnect."""
        self.client.disconnect()


class Devices:
    """One paho MQTT client per device, publishing JSON telemetry on ``devices/{id}/telemetry`` at QoS 1."""

    def __init__(self, broker: MqttBroker) -> None:
        self.broker = broker
        self.clients: dict[str, Client] = {}

    def publish(self, readings: list[Reading]) -> None:
        """Publish each reading from its device's own connection and wait for the PUBACK."""
        for device, ts, value in readings:
            client = self.clients.get(device) or self.clients.setdefault(device, Client(self.broker, device))
            client.publish(f"devices/{device}/telemetry", json.dumps({"ts": ts, "temperature": value}).encode(), qos=1)

    def close(self) -> None:
        """Disconnect every device."""
        for client in self.clients.values():
            client.disconnect()


def publish_before_start(broker: MqttBroker, prefix: str) -> None:
    """An out-of-band reading published before the job starts: a job starting at ``latest`` never reads it."""
    devices = Devices(broker)
    try:
        devices.publish([(f"{prefix}-earlier", 1_000, 99.0)])
    finally:
        devices.close()


def wait_until_running(devices: Devices, subscriber: Subscriber, base_ms: int, probe: str, timeout_s: float) -> None:
    """Publish a probe device's readings until both queries answer: they have fixed their start offsets.

    The probe's readings lie before the scenario's window, so the watermark they set drops none of it.
    """
    wanted = {f"devices/{probe}/alerts", f"aggregates/{probe}"}
    deadline = time.monotonic() + timeout_s
    while not wanted <= {topic for topic, _ in subscriber.results}:
        assert time.monotonic() < deadline, f"the pipeline never answered the probe: {subscriber.results}"
        devices.publish([(probe, base_ms + 1_000, 99.0), (probe, base_ms + 30_000, 20.0)])
        subscriber.collect_until(lambda results: wanted <= {topic for topic, _ in results}, timeout_s=3)


def scenario(prefix: str, window_start: int) -> tuple[list[Reading], dict[str, dict], dict[str, float]]:
    """Readings in one past window, then one a minute later per device to move the watermark past it."""
    one, two = f"{prefix}-1", f"{prefix}-2"
    readings = [(one, window_start + 1000, 20.0), (two, window_start + 1500, 25.0), (one, window_start + 2000, 22.0),
                (two, window_start + 3000, 99.0), (one, window_start + 4000, 24.0)]
    readings += [(one, window_start + 60_000, 21.0), (two, window_start + 60_000, 21.0)]
    expected = {
        f"aggregates/{one}": {"device": one, "window_start": window_start, "window_end": window_start + 10_000,
                              "count": 3, "mean": 22.0, "min": 20.0, "max": 24.0},
        f"aggregates/{two}": {"device": two, "window_start": window_start, "window_end": window_start + 10_000,
                              "count": 2, "mean": 62.0, "min": 25.0, "max": 99.0},
    }
    return readings, expected, {f"devices/{two}/alerts": 99.0}


def run_scenario(broker: MqttBroker, subscriber: Subscriber, prefix: str, timeout_s: float) -> None:
    """Probe until the running job answers, publish the scenario over MQTT, check what the subscriber gets."""
    base_ms = (time.time_ns() // 1_000_000 // 10_000) * 10_000 - 300_000
    readings, expected, alerts = scenario(prefix, window_start=base_ms + 120_000)
    devices = Devices(broker)
    try:
        wait_until_running(devices, subscriber, base_ms, f"{prefix}-probe", timeout_s)
        devices.publish(readings)

        def done(results: list[Result]) -> bool:
            return set(expected) | set(alerts) <= {topic for topic, body in results if body in expected.values() or topic in alerts}

        subscriber.collect_until(done, timeout_s)
        results = subscriber.collect_until(lambda _: False, timeout_s=2)  # anything extra would show up now
    finally:
        devices.close()
    first_windows = {topic: body for topic, body in results if topic in expected and body["window_start"] == base_ms + 120_000}
    assert first_windows == expected, results
    scenario_devices = {body["device"] for body in expected.values()}
    assert [(topic, body["value"], body["kind"]) for topic, body in results
            if topic.endswith("/alerts") and body["device"] in scenario_devices] == [(topic, value, "high") for topic, value in alerts.items()]
    assert not [topic for topic, _ in results if "earlier" in topic], "a job starting at latest read a record from before its start"


def test_paho_devices_to_mqtt_subscriber_through_spark(spark: SparkSession, spark_broker: MqttBroker, tmp_path: pathlib.Path) -> None:
    subscriber = Subscriber(spark_broker, "local-subscriber")
    publish_before_start(spark_broker, "local")
    settings = iot_aggregates.PipelineSettings(bootstrap=spark_broker.bootstrap, checkpoint_dir=str(tmp_path / "checkpoints"))
    queries = iot_aggregates.start(spark, settings)
    try:
        run_scenario(spark_broker, subscriber, "local", timeout_s=180)  # JVMs start slowly on a loaded machine
    finally:
        subscriber.close()
        for query in queries:
            query.stop()


@pytest.fixture
def standalone_cluster(tmp_path: pathlib.Path) -> Iterator[str]:
    """A Spark master and one worker from the pyspark installation, on loopback and free ports."""
    environment = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp_path), "SPARK_WORKER_DIR": str(tmp_path / "work")}
    master_port = free_port()
    master_url = f"spark://127.0.0.1:{master_port}"
    commands = [
        [SPARK_CLASS, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(master_port),
         "--webui-port", str(free_port())],
        [SPARK_CLASS, "org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1", "--cores", "2",
         "--memory", "1g", "--webui-port", str(free_port())],
    ]
    processes = []
    try:
        for index, command in enumerate(commands):
            with open(tmp_path / f"spark-{index}.log", "wb") as log:
                processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment))
        deadline = time.monotonic() + 60
        while b"Successfully registered with master" not in (tmp_path / "spark-1.log").read_bytes():
            assert time.monotonic() < deadline, (tmp_path / "spark-1.log").read_text()
            time.sleep(0.2)
        yield master_url
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(30)


def test_the_same_job_on_a_standalone_cluster(spark_broker: MqttBroker, standalone_cluster: str, tmp_path: pathlib.Path) -> None:
    subscriber = Subscriber(spark_broker, "cluster-subscriber")
    publish_before_start(spark_broker, "cluster")
    with open(tmp_path / "job.log", "wb") as log:
        job = subprocess.Popen(
            [sys.executable, "-m", "mqbroker_spark.jobs.iot_aggregates", "--master", standalone_cluster,
             "--bootstrap", spark_broker.bootstrap, "--checkpoint-dir", str(tmp_path / "checkpoints")],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
        )
    try:
        run_scenario(spark_broker, subscriber, "cluster", timeout_s=240)
    except AssertionError:
        print((tmp_path / "job.log").read_text()[-5000:])
        raise
    finally:
        subscriber.close()
        job.terminate()
        job.wait(60)
    assert b"app-" in (tmp_path / "spark-1.log").read_bytes(), "the executors ran on the cluster's worker"
