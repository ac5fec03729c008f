"""TLS benchmark: produce throughput over TLS vs plaintext in the same run, and the TLS handshake rate.

* throughput: one blocking producer, 100-byte messages, acks=1, against one broker that has both a
  plaintext and a TLS native listener (and ``log.flush.policy=interval``: fsync is not what this
  compares); plaintext and TLS rounds alternate, each round's first variant alternating too, and
  the report gives medians over ``--rounds`` and the median of the per-round TLS/plaintext ratios.
  Rates count acknowledged messages only; failed sends are counted and printed.
  Target: TLS >= 70% of plaintext.
* handshakes: full TLS handshakes per second (new connection, handshake, ApiVersions round trip,
  close) from one client, no session resumption.

Run: ``python benchmarks/tls_bench.py [--messages 300000] [--rounds 3] [--handshakes 300] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import socket
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mqbroker.cli.bench import produce_acknowledged  # noqa: E402
from mqbroker.security.certs import init_directory  # noqa: E402
from mqbroker.client import Admin, Producer  # noqa: E402
from mqbroker.client.security import ClientSecurity  # noqa: E402
from mqbroker.client.tls import client_ssl_context  # noqa: E402
from mqbroker.protocols.native.codec import encode_request  # noqa: E402
from mqbroker.protocols.native.messages import ApiKey, ApiVersionsRequest  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess, free_port  # noqa: E402

VALUE = b"v" * 100


#: Settings that differ from the defaults, printed with the figures.
BROKER_SETTINGS = ["--set", "log.flush.policy=interval"]
PRODUCER_SETTINGS = {"acks": 1, "linger_ms": 5, "enable_idempotence": False}


def _produce_rate(bootstrap: str, topic: str, messages: int, security: ClientSecurity | None) -> tuple[float, int]:
    """(acknowledged messages/s, failed sends) of one producer sending ``messages``."""
    with Producer(bootstrap, security=security, **PRODUCER_SETTINGS) as producer:  # type: ignore[arg-type]
        producer.send(topic, value=VALUE).result(30)  # connections and metadata before the clock starts
        outcomes = produce_acknowledged(producer, topic, VALUE, messages)
    return outcomes.acknowledged / outcomes.seconds, outcomes.failed


def _handshake_rate(port: int, ca: pathlib.Path, count: int) -> float:
    context = client_ssl_context(ca)
    ping = encode_request(ApiKey.API_VERSIONS, 0, 1, "bench", ApiVersionsRequest())
    started = time.perf_counter()
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(ping)
                assert tls.recv(65536)
    return count / (time.perf_counter() - started)


def run(messages: int, rounds: int, handshakes: int) -> dict[str, Any]:
    """Start a broker with both listeners and measure."""
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as directory:
        root = pathlib.Path(directory)
        files = init_directory(root / "tls", ["localhost", "127.0.0.1"], [])
        tls_port = free_port()
        broker = BrokerProcess(data_dir=root / "data", extra_args=[
            "--tls-cert", str(files.server), "--tls-key", str(files.server_key), "--native-tls-port", str(tls_port),
            *BROKER_SETTINGS,
        ])
        broker.start()
        try:
            with Admin(broker.bootstrap) as admin:
                admin.create_topics(["plain", "tls"], partitions=1)
            tls_security = ClientSecurity(ssl_context=client_ssl_context(files.ca))
            variants = {"plaintext": (broker.bootstrap, "plain", None), "tls": (f"localhost:{tls_port}", "tls", tls_security)}
            rates: dict[str, list[float]] = {"plaintext": [], "tls": []}
            failed = 0
            for number in range(rounds):
                for name in (("plaintext", "tls") if number % 2 == 0 else ("tls", "plaintext")):
                    bootstrap, topic, security = variants[name]
                    rate, round_failed = _produce_rate(bootstrap, topic, messages, security)
                    rates[name].append(rate)
                    failed += round_failed
            handshake_rate = _handshake_rate(tls_port, files.ca, handshakes)
        finally:
            broker.kill()
    plain, tls = statistics.median(rates["plaintext"]), statistics.median(rates["tls"])
    return {
        "plaintext_messages_per_second": round(plain),
        "tls_messages_per_second": round(tls),
        "tls_share_of_plaintext": round(statistics.median(t / p for t, p in zip(rates["tls"], rates["plaintext"])), 3),
        "plaintext_mb_per_second": round(plain * len(VALUE) / 1e6, 1),
        "tls_mb_per_second": round(tls * len(VALUE) / 1e6, 1),
        "tls_handshakes_per_second": round(handshake_rate),
        "sends_failed": failed,
        "all_rounds": {name: [round(rate) for rate in values] for name, values in rates.items()},
        "settings": {"broker": " ".join(BROKER_SETTINGS), "producer": PRODUCER_SETTINGS, "messages": messages,
                     "rounds": rounds},
    }


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--handshakes", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    result = run(arguments.messages, arguments.rounds, arguments.handshakes)
    if arguments.json:
        print(json.dumps(result, indent=2))
        return
    print(f"medians of {result['settings']['rounds']} alternating rounds of {result['settings']['messages']:,} messages; "
          f"broker {result['settings']['broker']}, producer {result['settings']['producer']}")
    print(f"plaintext: {result['plaintext_messages_per_second']:,} msg/s ({result['plaintext_mb_per_second']} MB/s)")
    print(f"TLS:       {result['tls_messages_per_second']:,} msg/s ({result['tls_mb_per_second']} MB/s) = "
          f"{result['tls_share_of_plaintext']:.0%} of plaintext (median of per-round ratios; target >= 70%)")
    print(f"TLS handshakes: {result['tls_handshakes_per_second']:,}/s")
    print(f"sends failed: {result['sends_failed']:,}; every round: {result['all_rounds']}")


if __name__ == "__main__":
    main()
