"""The source reader (x-source-topic) against the fake broker and a clock: positions advance only once routed
records are durable, a refused append routes the chunk again, stop ends the loop."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from mqbroker.model import Principal
from mqbroker.protocols.amqp.appender import BatchStored
from mqbroker.protocols.amqp.sources import SOURCE_RETRY_S, SourceReader, SourceRecord
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.header import stamp
from tests.fake_broker import FakeBroker


def _records(base_offset: int, count: int) -> bytes:
    builder = BatchBuilder()
    for index in range(count):
        builder.append(1_000, b"key.%d" % (base_offset + index), b"value %d" % (base_offset + index))
    batch = bytearray(builder.build())
    stamp(batch, 0, base_offset, 0)
    return bytes(batch)


class FakeHost:
    """Routes every record into one batch per chunk and records saved positions."""

    def __init__(self, log_end: int) -> None:
        self.broker = FakeBroker()
        self.broker.append("orders", _records(0, log_end))
        self.principal = Principal("Service", "amqp")
        self.reactor = Clock()
        self.routed: list[list[str]] = []
        self.batches: list[BatchStored] = []
        self.saved: list[dict[int, int]] = []

    def route_source(self, topic: str, records: list[SourceRecord]) -> list[BatchStored]:
        self.routed.append([record.routing_key for record in records])
        self.batches.append(BatchStored())
        return [self.batches[-1]]

    def save_positions(self, topic: str, positions: dict[int, int]) -> Deferred[None]:
        self.saved.append(positions)
        return succeed(None)

    def skip_unreadable(self, reader: str, batch: Any) -> None:
        raise AssertionError(f"{reader} skipped {batch}")


def test_the_position_is_saved_only_once_the_routed_records_are_durable() -> None:
    host = FakeHost(log_end=3)
    reader = SourceReader(host, "orders", {0: 1})
    assert host.routed == [["key.1", "key.2"]] and host.saved == []
    host.batches[0].settle(True)
    assert host.saved == [{0: 3}]
    fetched_from = [request.positions[0].offset for _, request in host.broker.calls_of("fetch")]
    assert fetched_from == [1, 3]  # then waits at the end of the log
    reader.stop()


def test_a_refused_append_routes_the_chunk_again_after_a_pause() -> None:
    host = FakeHost(log_end=2)
    reader = SourceReader(host, "orders", {0: 0})
    host.batches[0].settle(False)
    assert host.saved == [] and len(host.routed) == 1
    host.reactor.advance(SOURCE_RETRY_S)
    assert host.routed == [["key.0", "key.1"], ["key.0", "key.1"]]
    host.batches[1].settle(True)
    assert host.saved == [{0: 2}]
    reader.stop()


def test_stop_during_the_retry_pause_ends_the_reader() -> None:
    host = FakeHost(log_end=1)
    reader = SourceReader(host, "orders", {0: 0})
    host.batches[0].settle(False)
    reader.stop()
    assert reader.running.called
    host.reactor.advance(SOURCE_RETRY_S)
    assert len(host.routed) == 1
