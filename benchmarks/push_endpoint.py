"""A push endpoint for the queue benchmark: answers every POST with 204 at once, and counts.

Run as ``python benchmarks/push_endpoint.py IDLE_S``: it listens on a free loopback port, prints
the port, answers each request (HTTP/1.1, persistent connections) with ``204 No Content``, and once
``IDLE_S`` seconds pass after the last request (a minute without a first one) it prints one JSON line and exits: how many records
arrived (a batch's ``X-MQ-Batch-Size`` counts), when the first and last arrived (epoch seconds), and
each record's latency in ms when its value starts with the epoch send time as ``%018.6f``
(``latency_value``). It is asyncio with a hand-parsed request head, so the endpoint is not what
limits the broker's push rate.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

#: Seconds to wait for the first request before giving up.
FIRST_REQUEST_WAIT_S = 60
#: Bytes of a record value that carry its send time (epoch seconds, ``%018.6f``).
SENT_AT_BYTES = 18


def latency_value(body_bytes: int) -> bytes:
    """A record value carrying the time now, padded to ``body_bytes``."""
    return b"%018.6f" % time.time() + b"x" * max(0, body_bytes - SENT_AT_BYTES)


class Tally:
    """What arrived."""

    def __init__(self) -> None:
        self.records = 0
        self.first_s = 0.0
        self.last_s = 0.0
        self.latencies_ms: list[float] = []

    def arrived(self, body: bytes, count: int, single: bool) -> None:
        now = time.time()
        self.first_s = self.first_s or now
        self.last_s = now
        self.records += count
        if single and len(body) >= SENT_AT_BYTES:
            try:
                self.latencies_ms.append((now - float(body[:SENT_AT_BYTES])) * 1000)
            except ValueError:
                pass


class EndpointProtocol(asyncio.Protocol):
    """One connection: requests in, 204s out, in order."""

    def __init__(self, tally: Tally) -> None:
        self._tally = tally
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while (head_end := self._buffer.find(b"\r\n\r\n")) >= 0:
            length, count, single = 0, 1, True
            for line in self._buffer[:head_end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"x-mq-batch-size":
                    count, single = int(value), False
            end = head_end + 4 + length
            if len(self._buffer) < end:
                return
            body, self._buffer = self._buffer[head_end + 4 : end], self._buffer[end:]
            self._tally.arrived(body, count, single)
            assert self._transport is not None
            self._transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")


async def serve(idle_s: float) -> Tally:
    """Answer requests until ``idle_s`` pass after the last one (``FIRST_REQUEST_WAIT_S`` if none came)."""
    tally = Tally()
    server = await asyncio.get_running_loop().create_server(lambda: EndpointProtocol(tally), "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    started = time.time()
    while (time.time() - tally.last_s < idle_s) if tally.last_s else (time.time() - started < FIRST_REQUEST_WAIT_S):
        await asyncio.sleep(0.1)
    server.close()
    return tally


def main() -> None:
    """Serve, then print the tally as JSON."""
    tally = asyncio.run(serve(float(sys.argv[1])))
    print(json.dumps({"records": tally.records, "first_s": tally.first_s, "last_s": tally.last_s,
                      "latencies_ms": tally.latencies_ms}), flush=True)


if __name__ == "__main__":
    main()
