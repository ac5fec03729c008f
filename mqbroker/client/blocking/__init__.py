"""The blocking client: ``Producer``, ``Consumer``, ``ShareConsumer`` and ``Admin`` over plain sockets, no reactor.

For scripts and Spark workers. The producer runs one background I/O thread (the caller's
``send`` only appends to a batch, so sending overlaps with producing); the consumer and admin
do their I/O on the caller's thread. The logic is the pure ``ProducerCore`` and
``ConsumerCore``; these modules only move bytes and wait. Import the classes from
``mqbroker.client``.
"""

from mqbroker.client.blocking.admin import Admin
from mqbroker.client.blocking.consumer import Consumer
from mqbroker.client.blocking.delivery import RecordFuture, RecordsFuture
from mqbroker.client.blocking.producer import Producer
from mqbroker.client.blocking.share import ShareConsumer

__all__ = ["Admin", "Consumer", "Producer", "RecordFuture", "RecordsFuture", "ShareConsumer"]
