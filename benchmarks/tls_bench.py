"""TLS benchmark: produce throughput over TLS vs plaintext in the same run, and the TLS handshake rate.

* throughput: one blocking producer, 100-byte messages, acks=1, against one broker that has both a
  plaintext and a TLS native listener; plaintext and TLS runs alternate (best of ``--rounds``).
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
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mqbroker.security.certs import init_directory  # noqa: E402
from mqbroker.client import Admin, Producer  # noqa: E402
from mqbroker.client.security import ClientSecurity  # noqa: E402
from mqbroker.client.tls import client_ssl_context  # noqa: E402
from mqbroker.protocols.native.codec import encode_request  # noqa: E402
from mqbroker.protocols.native.messages import ApiKey, ApiVersionsRequest  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess, free_port  # noqa: E402

VALUE = b"v" * 100


def _produce_rate(bootstrap: str, topic: str, messages: int, security: ClientSecurity | None) -> float:
    with Producer(bootstrap, acks=1, linger_ms=5, security=security, enable_idempotence=False) as producer:
        producer.send(topic, value=VALUE).result(30)  # connections and metadata before the clock starts
        started = time.perf_counter()
        for _ in range(messages):
            producer.send(topic, value=VALUE)
        producer.flush(300)
        return messages / (time.perf_counter() - started)


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
            "--set", "log.flush.policy=interval",
        ])
        broker.start()
        try:
            with Admin(broker.bootstrap) as admin:
                admin.create_topics(["plain", "tls"], partitions=1)
            tls_security = ClientSecurity(ssl_context=client_ssl_context(files.ca))
            plain, tls = [], []
            for _ in range(rounds):
                plain.append(_produce_rate(broker.bootstrap, "plain", messages, None))
                tls.append(_produce_rate(f"localhost:{tls_port}", "tls", messages, tls_security))
            handshake_rate = _handshake_rate(tls_port, files.ca, handshakes)
        finally:
            broker.kill()
    return {
        "plaintext_messages_per_second": round(max(plain)),
        "tls_messages_per_second": round(max(tls)),
        "tls_share_of_plaintext": round(max(tls) / max(plain), 3),
        "plaintext_mb_per_second": round(max(plain) * len(VALUE) / 1e6, 1),
        "tls_mb_per_second": round(max(tls) * len(VALUE) / 1e6, 1),
        "tls_handshakes_per_second": round(handshake_rate),
        "all_rounds": {"plaintext": [round(rate) for rate in plain], "tls": [round(rate) for rate in tls]},
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
    print(f"plaintext: {result['plaintext_messages_per_second']:,} msg/s ({result['plaintext_mb_per_second']} MB/s)")
    print(f"TLS:       {result['tls_messages_per_second']:,} msg/s ({result['tls_mb_per_second']} MB/s) = "
          f"{result['tls_share_of_plaintext']:.0%} of plaintext (target >= 70%)")
    print(f"TLS handshakes: {result['tls_handshakes_per_second']:,}/s")


if __name__ == "__main__":
    main()
