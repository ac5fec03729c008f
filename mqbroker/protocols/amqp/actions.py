"""What the AMQP connection state machine asks its adapter to do, and what it is handed back.

The adapter carries out each action against the broker and reports results by calling the
connection again (``complete``, ``fail``, ``deliver``, ``publish_settled``...). Bytes to write
are not actions: they accumulate in ``Connection.data_to_send()``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Hashable, Mapping
from typing import Any, NamedTuple, Union

from mqbroker.protocols.amqp.spec import BasicProperties, Method


#: ``Delivery`` and ``Publish`` are made once per message: plain (not frozen) slotted dataclasses, as the frames
#: are (``codec.py``); nothing changes one after it is made.
@dataclasses.dataclass(slots=True, kw_only=True)
class Delivery:
    """A message the adapter hands to a consumer or a basic.get.

    ``message_ref`` is the adapter's own handle (for example a queue offset); it comes back
    unchanged in ``Unacked`` so the adapter can settle the message in its queue.
    """

    queue: str
    message_ref: Hashable
    redelivered: bool
    exchange: str
    routing_key: str
    properties_raw: bytes
    body: bytes


class Unacked(NamedTuple):
    """A delivery the client has not settled yet (a named tuple: the channel makes one per delivery, and a
    fetch's worth at once with ``tuple.__new__``, without a Python call each)."""

    delivery_tag: int
    consumer_tag: str | None  # None for basic.get
    queue: str
    message_ref: Hashable


class Outcome(enum.Enum):
    """How deliveries were settled."""

    ACK = "ack"  # done
    REQUEUE = "requeue"  # back to the queue, redelivered flag set
    DISCARD = "discard"  # rejected without requeue: dead-letter or drop


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Authenticate:
    """Check credentials; answer with ``authentication_succeeded`` or ``authentication_failed``."""

    mechanism: str
    username: str
    password: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Execute:
    """Run a broker-side method (exchange.*, queue.*, basic.get) on a channel.

    Answer with ``complete(channel, reply)`` when ``reply_expected`` (nowait was clear), or
    ``fail(channel, error)``. basic.get is answered with ``get_ok`` or ``complete(GetEmpty)``.
    """

    channel: int
    method: Method
    reply_expected: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Consume:
    """Start a consumer; answer with ``complete(channel, BasicConsumeOk)`` or ``fail``.

    Deliver with ``deliver`` while ``delivery_window`` is positive; ``ConsumersReady`` says
    when a window reopens.
    """

    channel: int
    consumer_tag: str
    queue: str
    no_ack: bool
    exclusive: bool
    arguments: Mapping[str, Any]
    reply_expected: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Cancel:
    """Stop delivering to a consumer (its unacked deliveries stay with the channel)."""

    channel: int
    consumer_tag: str


@dataclasses.dataclass(slots=True, kw_only=True)
class Published:
    """What a published message and a run of them (``Publish``, ``PublishRun``) carry alike.

    With ``confirm_sequence`` set the channel is in confirm mode: call ``publish_settled``
    once the message is durable (or refused). Unroutable mandatory messages go back with
    ``return_message`` before they are settled.
    """

    channel: int
    exchange: str
    routing_key: str
    mandatory: bool
    properties: BasicProperties
    properties_raw: bytes
    confirm_sequence: int | None


@dataclasses.dataclass(slots=True, kw_only=True)
class Publish(Published):
    """Route and store one complete message."""

    body: bytes
    transactional: bool = False  # published in a transaction: tx.commit-ok waits until it is durable


@dataclasses.dataclass(slots=True, kw_only=True)
class PublishRun(Published):
    """Route and store messages published one after another on a channel outside a transaction, alike but for
    their bodies (one basic.publish and one content header for all): ``Publish`` of each, in order, with one
    routing, one append per queue and one confirm run (``confirm_sequence`` numbers the first, the others follow).
    """

    bodies: list[bytes]

    def publishes(self) -> list[Publish]:
        """The run as its messages, one ``Publish`` each."""
        first = self.confirm_sequence
        return [Publish(channel=self.channel, exchange=self.exchange, routing_key=self.routing_key,
                        mandatory=self.mandatory, properties=self.properties, properties_raw=self.properties_raw,
                        body=body, confirm_sequence=None if first is None else first + number)
                for number, body in enumerate(self.bodies)]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Settle:
    """The client settled these deliveries."""

    channel: int
    deliveries: tuple[Unacked, ...]
    outcome: Outcome


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConsumersReady:
    """These consumers' delivery windows reopened (acks, qos change, flow resumed)."""

    channel: int
    consumer_tags: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ChannelClosed:
    """A channel is gone: requeue its unacked deliveries (redelivered) and drop its consumers."""

    channel: int
    unacked: tuple[Unacked, ...]
    consumer_tags: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CloseTransport:
    """Write what is pending in ``data_to_send`` and drop the socket."""

    reason: str


Action = Union[Authenticate, Execute, Consume, Cancel, Publish, PublishRun, Settle, ConsumersReady, ChannelClosed, CloseTransport]
