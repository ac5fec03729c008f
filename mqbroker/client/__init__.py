"""The native Python client: Producer, Consumer and Admin (blocking; Twisted variants in ``client.twisted``)."""

from mqbroker.client.blocking import Admin, Consumer, Producer, RecordFuture
from mqbroker.client.consumer import Message
from mqbroker.client.producer_batch import RecordMetadata

__all__ = ["Admin", "Consumer", "Message", "Producer", "RecordFuture", "RecordMetadata"]
