"""Simulated MQTT devices: each publishes JSON telemetry on ``devices/{id}/telemetry`` (paho-mqtt).

Readings wander around a set point; now and then one jumps outside the alert band so the
pipeline has something to flag. Seeded, so two runs with the same seed publish the same values.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion


def connect(host: str, port: int, client_id: str) -> mqtt.Client:
    """A connected paho client with its network loop running."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    client.connect(host, port, keepalive=30)
    client.loop_start()
    return client


def step(rng: random.Random, level: float) -> float:
    """A device's next normal level: a small step from ``level``, kept inside the band."""
    return min(38.0, max(2.0, level + rng.uniform(-0.5, 0.5)))


def reading(rng: random.Random, level: float, anomaly_rate: float) -> float:
    """What the device reports: its level, or now and then a spike far outside the band (the level stays)."""
    if rng.random() < anomaly_rate:
        return round(rng.choice((-15.0, 65.0)) + rng.uniform(-5, 5), 2)
    return round(level, 2)


def run(host: str, port: int, devices: int, interval_s: float, duration_s: float, anomaly_rate: float, seed: int) -> int:
    """Publish until ``duration_s`` passes; return how many readings were sent."""
    rng = random.Random(seed)
    clients = {f"device-{number}": connect(host, port, f"simulator-device-{number}") for number in range(devices)}
    levels = {device: rng.uniform(18.0, 24.0) for device in clients}
    sent = 0
    deadline = time.monotonic() + duration_s
    try:
        while time.monotonic() < deadline:
            started = time.monotonic()
            for device, client in clients.items():
                levels[device] = step(rng, levels[device])
                value = reading(rng, levels[device], anomaly_rate)
                payload = json.dumps({"ts": time.time_ns() // 1_000_000, "temperature": value})
                client.publish(f"devices/{device}/telemetry", payload, qos=1)
                sent += 1
            time.sleep(max(0.0, interval_s - (time.monotonic() - started)))
    finally:
        for client in clients.values():
            client.disconnect()  # before loop_stop, so the network loop still sends it
            client.loop_stop()
    return sent


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1883)
    parser.add_argument("--devices", type=int, default=5)
    parser.add_argument("--interval-s", type=float, default=0.5, help="seconds between one device's readings")
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--anomaly-rate", type=float, default=0.02, help="share of readings outside the band")
    parser.add_argument("--seed", type=int, default=1)
    arguments = parser.parse_args()
    try:
        sent = run(arguments.host, arguments.port, arguments.devices, arguments.interval_s, arguments.duration_s,
                   arguments.anomaly_rate, arguments.seed)
    except KeyboardInterrupt:  # Ctrl-C is how the demo is stopped early; run() has disconnected the devices
        print("simulator: stopped", flush=True)
        return
    print(f"simulator: {arguments.devices} devices published {sent} readings", flush=True)


if __name__ == "__main__":
    main()
