"""The native Python client: Producer, Consumer and Admin (blocking; Twisted variants in ``client.twisted``)."""

from mqbroker.client.blocking import Admin, Consumer, Producer, RecordFuture, RecordsFuture, ShareConsumer
from mqbroker.client.consumer import FetchedValues, Message, NoOffsetForPartitionError, PositionOutOfRangeError
from mqbroker.client.producer_batch import RecordMetadata
from mqbroker.client.share_core import ShareMessage

__all__ = ["Admin", "Consumer", "FetchedValues", "Message", "NoOffsetForPartitionError", "PositionOutOfRangeError",
           "Producer", "RecordFuture", "RecordMetadata", "RecordsFuture", "ShareConsumer", "ShareMessage"]
