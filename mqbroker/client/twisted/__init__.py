"""The Twisted client: Deferred-returning producer, consumer and admin over the same pure cores.

The reactor is passed in. Each broker connection is a ``NativeClientProtocol`` that moves bytes
between the transport and a sans-I/O ``ClientConnection``; requests return Deferreds fired by
correlation id. Connections are opened through endpoints on first use and reopened after a loss.
"""

from mqbroker.client.twisted.admin import TwistedAdmin
from mqbroker.client.twisted.consumer import RebalanceCallback, TwistedConsumer
from mqbroker.client.twisted.producer import TwistedProducer
from mqbroker.client.twisted.protocol import NativeClientProtocol
from mqbroker.client.twisted.share import TwistedShareConsumer

__all__ = ["NativeClientProtocol", "RebalanceCallback", "TwistedAdmin", "TwistedConsumer", "TwistedProducer",
           "TwistedShareConsumer"]
