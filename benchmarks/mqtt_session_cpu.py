"""MQTT front end hot path without I/O: CPU per PUBLISH through the sans-I/O session.

Run ``python benchmarks/mqtt_session_cpu.py [--messages 20000]``. Feeds a connected
``MqttSession`` QoS 0, 1 and 2 PUBLISH packets (100-byte payloads, 4 KiB reads, as a socket
would), completes their log writes, and prints the best of five runs of CPU time per message
at both protocol levels: decoding, the PUBLISH flow, and encoding the PUBACK / PUBREC; and ("deliver 1")
per QoS 1 message delivered to a subscribed session, with the client's PUBACK read back. It is the
part of a broker's CPU per MQTT message that the front end spends before the log append
(``mqtt_bench.py`` measures the whole broker against Mosquitto); process CPU time, so it holds
on a loaded machine better than wall-clock rates do.
"""

from __future__ import annotations

import argparse
import time

from mqbroker.protocols.mqtt.actions import PublishToLog
from mqbroker.protocols.mqtt.codec import encode
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.packets import Connect, PubAck, Publish
from mqbroker.protocols.mqtt.session import MqttSession
from mqbroker.protocols.mqtt.state import OutboundMessage, Subscription
from mqbroker.protocols.mqtt.topics import TopicMapping

READ_BYTES = 4096
WINDOW = 100
PAYLOAD = b"p" * 100


def cpu_us_per_message(level: int, qos: int, messages: int) -> float:
    """CPU microseconds per PUBLISH of one run: a fresh connected session, every packet read and acknowledged."""
    session = MqttSession(config=SessionConfig(receive_maximum=65_535), mapping=TopicMapping(),
                          generate_client_id=lambda: "bench")
    session.receive_data(encode(Connect(protocol_level=level, client_id="bench", keep_alive_s=0), level), 0)
    session.session_opened(None, 0)
    packets = b"".join(
        encode(Publish(topic="bench/cpu", payload=PAYLOAD, qos=qos, packet_id=(number % 65_000) + 1 if qos else None),
               level)
        for number in range(messages))
    reads = [packets[start:start + READ_BYTES] for start in range(0, len(packets), READ_BYTES)]
    started = time.process_time()
    for data in reads:
        tickets = [action.ticket for action in session.receive_data(data, 1)
                   if isinstance(action, PublishToLog) and action.ticket is not None]
        if tickets:
            session.log_writes_completed(tickets, 1)
    return (time.process_time() - started) / messages * 1e6


def delivery_cpu_us_per_message(level: int, messages: int) -> float:
    """CPU microseconds per QoS 1 delivery and its PUBACK: a subscribed session, 100 messages per window."""
    session = MqttSession(config=SessionConfig(outbound_inflight_max_3_1_1=WINDOW), mapping=TopicMapping(),
                          generate_client_id=lambda: "bench")
    session.receive_data(encode(Connect(protocol_level=level, client_id="bench", keep_alive_s=0), level), 0)
    session.session_opened(None, 0)
    subscriptions = [Subscription(topic_filter="#", qos=1)]
    message = OutboundMessage(topic="bench/cpu", payload=PAYLOAD, qos=1)
    # The client's PUBACKs for each window, encoded beforehand (packet ids are allocated 1, 2, 3...).
    pubacks = [b"".join(encode(PubAck(packet_id=(start + offset) % 65_535 + 1), level) for offset in range(WINDOW))
               for start in range(0, messages - messages % WINDOW, WINDOW)]
    started = time.process_time()
    for acknowledgements in pubacks:
        for _ in range(WINDOW):
            session.deliver(message, subscriptions, 1)
        session.receive_data(acknowledgements, 1)
    return (time.process_time() - started) / (len(pubacks) * WINDOW) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    arguments = parser.parse_args()
    print(f"{'':18}{'QoS 0':>10}{'QoS 1':>10}{'QoS 2':>10}{'deliver 1':>12}   (us CPU per PUBLISH, best of 5)")
    for level, name in ((4, "MQTT 3.1.1"), (5, "MQTT 5.0")):
        cells = [min(cpu_us_per_message(level, qos, arguments.messages) for _ in range(5)) for qos in (0, 1, 2)]
        delivery = min(delivery_cpu_us_per_message(level, arguments.messages) for _ in range(5))
        print(f"{name:18}" + "".join(f"{cell:10.2f}" for cell in cells) + f"{delivery:12.2f}")


if __name__ == "__main__":
    main()
