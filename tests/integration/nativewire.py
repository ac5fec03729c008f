"""A raw native-protocol connection for tests that must send exactly the bytes they choose."""

from __future__ import annotations

import socket
from typing import Any

from mqbroker.protocols.native import messages as m
from mqbroker.protocols.native.connection import ClientConnection, ConnectionFailed


class RawNativeConnection:
    """One socket and a ``ClientConnection``; ``call`` sends a request and waits for its answer."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.socket = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.codec = ClientConnection("tests")

    def send(self, request: Any) -> int:
        """Send a request without waiting; return its correlation id."""
        correlation_id, data = self.codec.send_request(request)
        self.socket.sendall(data)
        return correlation_id

    def receive(self, correlation_id: int) -> Any:
        """Wait for the response to ``correlation_id`` (an ``ErrorResponse`` included)."""
        while True:
            data = self.socket.recv(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            for event in self.codec.receive_data(data):
                assert not isinstance(event, ConnectionFailed), event
                if event.correlation_id == correlation_id:
                    return event.response

    def call(self, request: Any) -> Any:
        """Send ``request`` and return its response."""
        return self.receive(self.send(request))

    def send_bytes(self, data: bytes) -> None:
        """Write raw bytes (malformed frames)."""
        self.socket.sendall(data)

    def read_until_closed(self) -> bytes:
        """Everything the broker sends until it closes the connection."""
        received = b""
        while chunk := self.socket.recv(65536):
            received += chunk
        return received

    def close(self) -> None:
        """Close the socket."""
        self.socket.close()


def produce_batch(port: int, topic: str, partition: int, batch: bytes) -> int:
    """Append ``batch`` as it is to ``topic``'s ``partition`` (acks=1) through a connection of its own; return the
    produce's error code (0: appended). For batches no client builds, such as ``tests.poison``'s."""
    raw = RawNativeConnection(port)
    try:
        answer = raw.call(m.ProduceRequest(acks=1, timeout_ms=5_000, topics=(m.ProduceTopic(
            name=topic, partitions=(m.ProducePartition(partition_index=partition, records=batch),)),)))
    finally:
        raw.close()
    return int(answer.topics[0].partitions[0].error_code)
