"""The virtual host's source readers: one per native topic that some exchange names in
``x-source-topic``, started, stopped and positioned as declarations come and go (``sources.py``
holds the reader itself). Positions are stored in ``__amqp_source_positions``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred

from mqbroker import errors
from mqbroker.model import LATEST_TIMESTAMP
from mqbroker.protocols.amqp import spec
from mqbroker.protocols.amqp.appender import BatchStored
from mqbroker.protocols.amqp.routing import Exchange
from mqbroker.protocols.amqp.sources import (
    SOURCE_POSITIONS_TOPIC,
    SOURCE_TOPIC_ARGUMENT,
    Positions,
    SourceReader,
    SourceRecord,
    encode_positions,
    resolve_positions,
    source_topic,
)
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode

if TYPE_CHECKING:
    from mqbroker.protocols.amqp.vhost import VirtualHost


class SourceReaders:
    """The source readers of one virtual host, by the native topic each reads."""

    def __init__(self, vhost: VirtualHost) -> None:
        self.vhost = vhost
        self.readers: dict[str, SourceReader] = {}  # native topic → the reader routing it into exchanges

    def __contains__(self, topic: str) -> bool:
        return topic in self.readers

    async def sync(self, stored: dict[str, Positions]) -> None:
        """One reader per topic some exchange names in ``x-source-topic``: start the missing ones from
        ``stored`` (a replay; partitions without a position from their start), stop and forget the rest."""
        wanted = {topic for exchange in self.vhost.router.exchanges.values()
                  if (topic := source_topic(exchange.arguments)) is not None}
        gone = [topic for topic in self.readers if topic not in wanted]
        for topic in gone:
            self.readers.pop(topic).stop()
        for topic in sorted(wanted - self.readers.keys()):
            self.readers[topic] = SourceReader(self.vhost, topic, stored.get(topic, {}))
        forgotten = set(gone) | (stored.keys() - wanted)
        await self.vhost.write_records(SOURCE_POSITIONS_TOPIC, [(topic.encode("utf-8", "surrogateescape"), None)
                                                                for topic in sorted(forgotten)])

    async def start(self, topic: str, exchange: Exchange, method: spec.ExchangeDeclare) -> None:
        """Declare ``exchange`` reading the native ``topic`` from its current end: the positions are
        stored before declare-ok, so every record produced after it is routed."""
        vhost = self.vhost
        try:
            start = await resolve_positions(vhost.broker, vhost.principal, topic, {}, LATEST_TIMESTAMP)
        except errors.UnknownTopicOrPartitionError:
            raise AmqpError(ReplyCode.NOT_FOUND, f"no topic '{topic}' to read ({SOURCE_TOPIC_ARGUMENT})",
                            class_id=method.CLASS_ID, method_id=method.METHOD_ID) from None
        vhost.router.declare_exchange(exchange)
        if topic not in self.readers:  # another connection may have started it meanwhile
            await self.save_positions(topic, start)
            if topic not in self.readers:
                self.readers[topic] = SourceReader(vhost, topic, start)

    def save_positions(self, topic: str, positions: Positions) -> Deferred[None]:
        """Store a source reader's positions (durably)."""
        entry = (topic.encode("utf-8", "surrogateescape"), encode_positions(positions))
        return Deferred.fromCoroutine(self.vhost.write_records(SOURCE_POSITIONS_TOPIC, [entry]))

    def route(self, topic: str, records: list[SourceRecord]) -> list[BatchStored]:
        """Route records of a native topic through every exchange reading it; the batches they went to."""
        exchanges = [name for name, exchange in self.vhost.router.exchanges.items()
                     if source_topic(exchange.arguments) == topic]
        batches: dict[BatchStored, None] = {}
        for record in records:
            for exchange in exchanges:
                batches.update(dict.fromkeys(self.vhost.store(exchange, record.routing_key, record.headers,
                                                              record.properties_raw, record.body, None)))
        return list(batches)
