"""The supported subset of AMQP 0-9-1: method and property tables, reply codes, wire constants.

One source of truth: each method is a frozen dataclass whose field annotations carry the
wire type (``Annotated[int, Kind.SHORT]``), in the spec's argument order. The codec walks
``Method.ARGUMENTS``, so adding a method is adding one class here. The set is the 41 method
ids pika, amqp-tools, kombu, Celery and aio-pika were measured to use, plus the cheap
neighbours they expose (queue.unbind, basic.recover, channel.flow, exchange.bind/unbind,
connection.blocked/unblocked, tx.*). Methods defined by the spec but absent here (access.request,
connection.secure, basic.recover-async) are answered with 540 NOT_IMPLEMENTED.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Annotated, Any, Callable, ClassVar, TypeVar

#: The 8 bytes a client opens with; a server answers any other header with these and closes.
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
#: Every frame ends with this octet; anything else is a framing error.
FRAME_END = 0xCE
#: type (1) + channel (2) + size (4) before the payload, frame-end (1) after it.
FRAME_OVERHEAD_BYTES = 8
#: The smallest frame_max a peer may negotiate (spec constant frame-min-size).
FRAME_MIN_BYTES = 4096
#: Class id of the only content class (basic).
BASIC_CLASS_ID = 60


class FrameType(enum.IntEnum):
    """Frame type octet."""

    METHOD = 1
    HEADER = 2
    BODY = 3
    HEARTBEAT = 8


class Kind(enum.Enum):
    """Wire type of one method argument or content property."""

    OCTET = "octet"
    SHORT = "short"
    LONG = "long"
    LONGLONG = "longlong"
    SHORTSTR = "shortstr"
    LONGSTR = "longstr"
    BIT = "bit"
    TABLE = "table"
    TIMESTAMP = "timestamp"


class ReplyCode(enum.IntEnum):
    """Reply codes of Connection.Close / Channel.Close / Basic.Return (spec constants)."""

    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541


#: The spec's "hard-error" class: these close the whole connection; the rest close a channel.
HARD_REPLY_CODES = frozenset(
    {
        ReplyCode.CONNECTION_FORCED,
        ReplyCode.INVALID_PATH,
        ReplyCode.FRAME_ERROR,
        ReplyCode.SYNTAX_ERROR,
        ReplyCode.COMMAND_INVALID,
        ReplyCode.CHANNEL_ERROR,
        ReplyCode.UNEXPECTED_FRAME,
        ReplyCode.RESOURCE_ERROR,
        ReplyCode.NOT_ALLOWED,
        ReplyCode.NOT_IMPLEMENTED,
        ReplyCode.INTERNAL_ERROR,
    }
)


def is_hard(reply_code: int) -> bool:
    """True when the spec classes ``reply_code`` as a connection-level (hard) error."""
    return reply_code in HARD_REPLY_CODES


Octet = Annotated[int, Kind.OCTET]
Short = Annotated[int, Kind.SHORT]
Long = Annotated[int, Kind.LONG]
LongLong = Annotated[int, Kind.LONGLONG]
ShortStr = Annotated[str, Kind.SHORTSTR]
LongStr = Annotated[bytes, Kind.LONGSTR]
Bit = Annotated[bool, Kind.BIT]
Table = Annotated[dict[str, Any], Kind.TABLE]
Timestamp = Annotated[int, Kind.TIMESTAMP]


@dataclasses.dataclass(frozen=True, slots=True)
class Argument:
    """One method argument or content property: its field name and wire type."""

    name: str
    kind: Kind


class Method:
    """Base of every method dataclass; the class variables are filled in by ``_method``."""

    __slots__ = ()
    CLASS_ID: ClassVar[int]
    METHOD_ID: ClassVar[int]
    NAME: ClassVar[str]
    ARGUMENTS: ClassVar[tuple[Argument, ...]]
    HAS_CONTENT: ClassVar[bool]
    SENT_BY_CLIENT: ClassVar[bool]


#: (class id, method id) → method class, for every supported method.
METHODS: dict[tuple[int, int], type[Method]] = {}
#: Readable names of the classes, for error texts.
CLASS_NAMES = {10: "connection", 20: "channel", 40: "exchange", 50: "queue", 60: "basic", 85: "confirm", 90: "tx"}

_M = TypeVar("_M", bound=type)


def _arguments_of(cls: type) -> tuple[Argument, ...]:
    """Read the wire types from the ``Annotated`` field hints, in declaration order."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple(Argument(field.name, _kind_of(hints[field.name])) for field in dataclasses.fields(cls))


def _kind_of(hint: Any) -> Kind:
    """The ``Kind`` carried by an ``Annotated`` hint (possibly inside ``X | None``)."""
    if typing.get_origin(hint) is not Annotated:
        (hint,) = [member for member in typing.get_args(hint) if member is not type(None)]
    (kind,) = hint.__metadata__
    assert isinstance(kind, Kind)
    return kind


def _method(class_id: int, method_id: int, *, content: bool = False, client: bool = True) -> Callable[[_M], _M]:
    """Make ``cls`` a frozen method dataclass and register it under its ids."""

    def register(cls: _M) -> _M:
        built = dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(cls)
        built.CLASS_ID = class_id
        built.METHOD_ID = method_id
        built.NAME = f"{CLASS_NAMES[class_id]}.{_dotted(cls.__name__, CLASS_NAMES[class_id])}"
        built.ARGUMENTS = _arguments_of(built)
        built.HAS_CONTENT = content
        built.SENT_BY_CLIENT = client
        assert (class_id, method_id) not in METHODS
        METHODS[(class_id, method_id)] = built
        return typing.cast(_M, built)

    return register


def _dotted(class_name: str, amqp_class: str) -> str:
    """``BasicGetOk`` → ``get-ok`` (the spec's spelling, used in error texts)."""
    words = []
    for character in class_name[len(amqp_class) :]:
        if character.isupper() and words:
            words.append("-")
        words.append(character.lower())
    return "".join(words)


def _table() -> Any:
    return dataclasses.field(default_factory=dict)


# --- connection (10) -------------------------------------------------------------------


@_method(10, 10, client=False)
class ConnectionStart(Method):
    """Server's opening: protocol version, properties, SASL mechanisms and locales."""

    version_major: Octet = 0
    version_minor: Octet = 9
    server_properties: Table = _table()
    mechanisms: LongStr = b"PLAIN AMQPLAIN"
    locales: LongStr = b"en_US"


@_method(10, 11)
class ConnectionStartOk(Method):
    """Client's properties, chosen mechanism and its SASL response."""

    client_properties: Table = _table()
    mechanism: ShortStr = "PLAIN"
    response: LongStr = b""
    locale: ShortStr = "en_US"


@_method(10, 30, client=False)
class ConnectionTune(Method):
    """Server's proposed channel_max, frame_max and heartbeat (seconds)."""

    channel_max: Short = 0
    frame_max: Long = 0
    heartbeat: Short = 0


@_method(10, 31)
class ConnectionTuneOk(Method):
    """Client's accepted channel_max, frame_max and heartbeat (seconds)."""

    channel_max: Short = 0
    frame_max: Long = 0
    heartbeat: Short = 0


@_method(10, 40)
class ConnectionOpen(Method):
    """Client opens a virtual host."""

    virtual_host: ShortStr = "/"
    capabilities: ShortStr = ""
    insist: Bit = False


@_method(10, 41, client=False)
class ConnectionOpenOk(Method):
    """Server confirms the virtual host."""

    known_hosts: ShortStr = ""


@_method(10, 50)
class ConnectionClose(Method):
    """Either side closes the connection, with the reply code and the failing method's ids."""

    reply_code: Short = 200
    reply_text: ShortStr = ""
    class_id: Short = 0
    method_id: Short = 0


@_method(10, 51)
class ConnectionCloseOk(Method):
    """Confirms a connection.close; the sender of close may now drop the socket."""


@_method(10, 60, client=False)
class ConnectionBlocked(Method):
    """Server stops reading publishes (backpressure); needs capability connection.blocked."""

    reason: ShortStr = ""


@_method(10, 61, client=False)
class ConnectionUnblocked(Method):
    """Server accepts publishes again."""


# --- channel (20) ----------------------------------------------------------------------


@_method(20, 10)
class ChannelOpen(Method):
    """Client opens a channel (out_of_band is obsolete and ignored)."""

    out_of_band: ShortStr = ""


@_method(20, 11, client=False)
class ChannelOpenOk(Method):
    """Server confirms the channel."""

    channel_id: LongStr = b""


@_method(20, 20)
class ChannelFlow(Method):
    """Pause (active=False) or resume deliveries on a channel."""

    active: Bit = True


@_method(20, 21)
class ChannelFlowOk(Method):
    """Confirms a channel.flow."""

    active: Bit = True


@_method(20, 40)
class ChannelClose(Method):
    """Either side closes a channel, with the reply code and the failing method's ids."""

    reply_code: Short = 200
    reply_text: ShortStr = ""
    class_id: Short = 0
    method_id: Short = 0


@_method(20, 41)
class ChannelCloseOk(Method):
    """Confirms a channel.close; the channel id may be reused."""


# --- exchange (40) ---------------------------------------------------------------------


@_method(40, 10)
class ExchangeDeclare(Method):
    """Create an exchange, or check one exists with these flags (passive)."""

    reserved_1: Short = 0
    exchange: ShortStr = ""
    type: ShortStr = "direct"
    passive: Bit = False
    durable: Bit = False
    auto_delete: Bit = False
    internal: Bit = False
    nowait: Bit = False
    arguments: Table = _table()


@_method(40, 11, client=False)
class ExchangeDeclareOk(Method):
    """Confirms exchange.declare."""


@_method(40, 20)
class ExchangeDelete(Method):
    """Delete an exchange (if_unused: only when it has no bindings)."""

    reserved_1: Short = 0
    exchange: ShortStr = ""
    if_unused: Bit = False
    nowait: Bit = False


@_method(40, 21, client=False)
class ExchangeDeleteOk(Method):
    """Confirms exchange.delete."""


@_method(40, 30)
class ExchangeBind(Method):
    """Bind exchange ``destination`` to ``source`` (RabbitMQ extension)."""

    reserved_1: Short = 0
    destination: ShortStr = ""
    source: ShortStr = ""
    routing_key: ShortStr = ""
    nowait: Bit = False
    arguments: Table = _table()


@_method(40, 31, client=False)
class ExchangeBindOk(Method):
    """Confirms exchange.bind."""


@_method(40, 40)
class ExchangeUnbind(Method):
    """Remove an exchange-to-exchange binding (RabbitMQ extension)."""

    reserved_1: Short = 0
    destination: ShortStr = ""
    source: ShortStr = ""
    routing_key: ShortStr = ""
    nowait: Bit = False
    arguments: Table = _table()


@_method(40, 51, client=False)
class ExchangeUnbindOk(Method):
    """Confirms exchange.unbind (method id 51, not 41: RabbitMQ's numbering)."""


# --- queue (50) ------------------------------------------------------------------------


@_method(50, 10)
class QueueDeclare(Method):
    """Create a queue (an empty name asks for a server-generated one) or check one exists."""

    reserved_1: Short = 0
    queue: ShortStr = ""
    passive: Bit = False
    durable: Bit = False
    exclusive: Bit = False
    auto_delete: Bit = False
    nowait: Bit = False
    arguments: Table = _table()


@_method(50, 11, client=False)
class QueueDeclareOk(Method):
    """The queue's name with its ready-message and consumer counts."""

    queue: ShortStr = ""
    message_count: Long = 0
    consumer_count: Long = 0


@_method(50, 20)
class QueueBind(Method):
    """Bind a queue to an exchange with a routing key (or header arguments)."""

    reserved_1: Short = 0
    queue: ShortStr = ""
    exchange: ShortStr = ""
    routing_key: ShortStr = ""
    nowait: Bit = False
    arguments: Table = _table()


@_method(50, 21, client=False)
class QueueBindOk(Method):
    """Confirms queue.bind."""


@_method(50, 30)
class QueuePurge(Method):
    """Drop every ready message of a queue."""

    reserved_1: Short = 0
    queue: ShortStr = ""
    nowait: Bit = False


@_method(50, 31, client=False)
class QueuePurgeOk(Method):
    """How many messages the purge dropped."""

    message_count: Long = 0


@_method(50, 40)
class QueueDelete(Method):
    """Delete a queue (optionally only when unused or empty)."""

    reserved_1: Short = 0
    queue: ShortStr = ""
    if_unused: Bit = False
    if_empty: Bit = False
    nowait: Bit = False


@_method(50, 41, client=False)
class QueueDeleteOk(Method):
    """How many messages were deleted with the queue."""

    message_count: Long = 0


@_method(50, 50)
class QueueUnbind(Method):
    """Remove a queue binding (the spec gives this method no nowait flag)."""

    reserved_1: Short = 0
    queue: ShortStr = ""
    exchange: ShortStr = ""
    routing_key: ShortStr = ""
    arguments: Table = _table()


@_method(50, 51, client=False)
class QueueUnbindOk(Method):
    """Confirms queue.unbind."""


# --- basic (60) ------------------------------------------------------------------------


@_method(60, 10)
class BasicQos(Method):
    """Prefetch limit: per consumer (global_=False) or per channel (global_=True)."""

    prefetch_size: Long = 0
    prefetch_count: Short = 0
    global_: Bit = False


@_method(60, 11, client=False)
class BasicQosOk(Method):
    """Confirms basic.qos."""


@_method(60, 20)
class BasicConsume(Method):
    """Start a consumer on a queue (an empty tag asks for a server-generated one)."""

    reserved_1: Short = 0
    queue: ShortStr = ""
    consumer_tag: ShortStr = ""
    no_local: Bit = False
    no_ack: Bit = False
    exclusive: Bit = False
    nowait: Bit = False
    arguments: Table = _table()


@_method(60, 21, client=False)
class BasicConsumeOk(Method):
    """The consumer's tag."""

    consumer_tag: ShortStr = ""


@_method(60, 30)
class BasicCancel(Method):
    """End a consumer; the server sends it too when the queue is deleted."""

    consumer_tag: ShortStr = ""
    nowait: Bit = False


@_method(60, 31)
class BasicCancelOk(Method):
    """Confirms basic.cancel."""

    consumer_tag: ShortStr = ""


@_method(60, 40, content=True)
class BasicPublish(Method):
    """Publish the following content to an exchange."""

    reserved_1: Short = 0
    exchange: ShortStr = ""
    routing_key: ShortStr = ""
    mandatory: Bit = False
    immediate: Bit = False


@_method(60, 50, content=True, client=False)
class BasicReturn(Method):
    """Give back an unroutable mandatory message."""

    reply_code: Short = 312
    reply_text: ShortStr = "NO_ROUTE"
    exchange: ShortStr = ""
    routing_key: ShortStr = ""


@_method(60, 60, content=True, client=False)
class BasicDeliver(Method):
    """Push a message to a consumer."""

    consumer_tag: ShortStr = ""
    delivery_tag: LongLong = 0
    redelivered: Bit = False
    exchange: ShortStr = ""
    routing_key: ShortStr = ""


@_method(60, 70)
class BasicGet(Method):
    """Pull one message from a queue."""

    reserved_1: Short = 0
    queue: ShortStr = ""
    no_ack: Bit = False


@_method(60, 71, content=True, client=False)
class BasicGetOk(Method):
    """The pulled message, with the count still ready in the queue."""

    delivery_tag: LongLong = 0
    redelivered: Bit = False
    exchange: ShortStr = ""
    routing_key: ShortStr = ""
    message_count: Long = 0


@_method(60, 72, client=False)
class BasicGetEmpty(Method):
    """basic.get found the queue empty."""

    cluster_id: ShortStr = ""


@_method(60, 80)
class BasicAck(Method):
    """Acknowledge deliveries (client) or confirm publishes (server)."""

    delivery_tag: LongLong = 0
    multiple: Bit = False


@_method(60, 90)
class BasicReject(Method):
    """Refuse one delivery: requeue it or dead-letter it."""

    delivery_tag: LongLong = 0
    requeue: Bit = True


@_method(60, 110)
class BasicRecover(Method):
    """Redeliver every unacknowledged delivery of the channel."""

    requeue: Bit = False


@_method(60, 111, client=False)
class BasicRecoverOk(Method):
    """Confirms basic.recover."""


@_method(60, 120)
class BasicNack(Method):
    """Refuse deliveries (client) or negatively confirm publishes (server)."""

    delivery_tag: LongLong = 0
    multiple: Bit = False
    requeue: Bit = True


# --- confirm (85) ----------------------------------------------------------------------


@_method(85, 10)
class ConfirmSelect(Method):
    """Put the channel into publisher-confirm mode."""

    nowait: Bit = False


@_method(85, 11, client=False)
class ConfirmSelectOk(Method):
    """Confirms confirm.select."""


# --- tx (90) ---------------------------------------------------------------------------


@_method(90, 10)
class TxSelect(Method):
    """Make the channel transactional: publishes and acks wait for tx.commit."""


@_method(90, 11, client=False)
class TxSelectOk(Method):
    """Confirms tx.select."""


@_method(90, 20)
class TxCommit(Method):
    """Carry out the publishes and acks of the current transaction."""


@_method(90, 21, client=False)
class TxCommitOk(Method):
    """The transaction's publishes are durable and its acks applied."""


@_method(90, 30)
class TxRollback(Method):
    """Discard the publishes and acks of the current transaction."""


@_method(90, 31, client=False)
class TxRollbackOk(Method):
    """Confirms tx.rollback."""


#: The method ids the measured clients used (reference "Method set"); the rest are extras.
MEASURED_METHOD_IDS = frozenset(
    [(10, 10), (10, 11), (10, 30), (10, 31), (10, 40), (10, 41), (10, 50), (10, 51)]
    + [(20, 10), (20, 11), (20, 40), (20, 41)]
    + [(40, 10), (40, 11), (40, 20), (40, 21)]
    + [(50, 10), (50, 11), (50, 20), (50, 21), (50, 30), (50, 31), (50, 40), (50, 41)]
    + [(60, 10), (60, 11), (60, 20), (60, 21), (60, 30), (60, 31), (60, 40), (60, 50), (60, 60)]
    + [(60, 70), (60, 71), (60, 72), (60, 80), (60, 90), (60, 120), (85, 10), (85, 11)]
)

OptionalShortStr = Annotated[str | None, Kind.SHORTSTR]
OptionalOctet = Annotated[int | None, Kind.OCTET]
OptionalTable = Annotated[dict[str, Any] | None, Kind.TABLE]
OptionalTimestamp = Annotated[int | None, Kind.TIMESTAMP]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BasicProperties:
    """Content-header properties of class basic; None means absent (its flag bit is clear).

    Field order is flag-bit order from bit 15 down, and the order on the wire.
    """

    content_type: OptionalShortStr = None
    content_encoding: OptionalShortStr = None
    headers: OptionalTable = None
    delivery_mode: OptionalOctet = None
    priority: OptionalOctet = None
    correlation_id: OptionalShortStr = None
    reply_to: OptionalShortStr = None
    expiration: OptionalShortStr = None
    message_id: OptionalShortStr = None
    timestamp: OptionalTimestamp = None
    type: OptionalShortStr = None
    user_id: OptionalShortStr = None
    app_id: OptionalShortStr = None
    cluster_id: OptionalShortStr = None


#: The basic content properties in flag-bit order (bit 15 first).
BASIC_PROPERTIES: tuple[Argument, ...] = _arguments_of(BasicProperties)
assert len(BASIC_PROPERTIES) == 14


class AmqpError(Exception):
    """A peer's bad input or a refused operation, reported with an AMQP reply code.

    ``connection_level`` follows the spec's hard/soft classing of the code, except where the
    spec itself closes the connection with a soft code (403 during the handshake).
    ``class_id``/``method_id`` name the method that failed (0 when it was not a method).
    """

    def __init__(
        self,
        reply_code: ReplyCode,
        reply_text: str,
        *,
        class_id: int = 0,
        method_id: int = 0,
        connection_level: bool | None = None,
    ) -> None:
        super().__init__(f"{reply_code.value} {reply_code.name}: {reply_text}")
        self.reply_code = reply_code
        # Close reply texts are shortstr on the wire; keep the head of a long explanation.
        self.reply_text = f"{reply_code.name} - {reply_text}".encode()[:255].decode(errors="ignore")
        self.class_id = class_id
        self.method_id = method_id
        self.connection_level = is_hard(reply_code) if connection_level is None else connection_level

    def __repr__(self) -> str:
        return f"AmqpError({self.reply_code.name}, {self.reply_text!r})"


class ProtocolHeaderMismatch(AmqpError):
    """The peer opened with something other than AMQP 0-9-1's header: answer ours and close."""

    def __init__(self, received: bytes) -> None:
        super().__init__(ReplyCode.FRAME_ERROR, f"unsupported protocol header {received!r}")
