"""How AMQP entities live in the log: queue topics, message records and declaration records. Pure.

A queue ``q`` is the one-partition log topic ``queue_topic(q)``. A message is one record:
value = body, key = routing key, headers ``amqp.exchange``, ``amqp.routing-key``,
``amqp.properties`` (the content header's raw property list, replayed byte for byte) and
``amqp.expiration`` when the message has one. Records without these headers (produced by a
native client onto a queue topic) are delivered with empty properties, exchange ``""`` and
the record key as routing key.

Declarations are records of the compacted topic ``__amqp_metadata``: key ``e:<exchange>``,
``q:<queue>`` or ``b:<binding>``, value an AMQP field table (so any argument value round
trips), a tombstone (None) when deleted. ``__amqp_queue_state`` holds each queue's
``QueueState`` snapshot keyed by queue name.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import operator
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")

from mqbroker import limits
from mqbroker.protocols.amqp import fields
from mqbroker.protocols.amqp.codec import remember
from mqbroker.protocols.amqp.queue_arguments import parse_expiration
from mqbroker.protocols.amqp.queue_state import QueuedMessage
from mqbroker.protocols.amqp.routing import (
    Binding,
    DestinationKind,
    Exchange,
    ExchangeType,
)
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.compression import DECOMPRESSED_BYTES_MAX
from mqbroker.records.decoder import decode_records_as, decode_rows
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.record import RecordHeader

METADATA_TOPIC = "__amqp_metadata"
QUEUE_STATE_TOPIC = "__amqp_queue_state"
QUEUE_TOPIC_PREFIX = "amqp.queue."
DEAD_LETTER_TOPIC_SUFFIX = ".dead"
_TOPIC_NAME_LENGTH_MAX = 249
_KEPT = frozenset(string.ascii_letters + string.digits + "-")
#: The property list of a message without properties (flags word 0).
EMPTY_PROPERTIES = b"\x00\x00"

_EXCHANGE = "amqp.exchange"
_ROUTING_KEY = "amqp.routing-key"
_PROPERTIES = "amqp.properties"
_EXPIRATION = "amqp.expiration"
#: What ``delivery_frames`` reads a delivery from: the three headers ``append_message`` writes first, in its
#: order, and the property list of a record without one.
STORED_LAYOUT = (_EXCHANGE, _ROUTING_KEY, _PROPERTIES, EMPTY_PROPERTIES)


def queue_topic(queue: str) -> str:
    """The log topic of a queue: letters, digits and '-' kept, every other byte as ``_hh``.

    The escape is injective and never yields a '.', so names too long to escape become
    ``amqp.queue.h.<sha256>`` without colliding with any escaped name.
    """
    escaped = "".join(
        char if char in _KEPT else "".join(f"_{byte:02x}" for byte in char.encode("utf-8", "surrogateescape"))
        for char in queue
    )
    topic = QUEUE_TOPIC_PREFIX + escaped
    if len(topic) > _TOPIC_NAME_LENGTH_MAX:
        topic = QUEUE_TOPIC_PREFIX + "h." + hashlib.sha256(queue.encode("utf-8", "surrogateescape")).hexdigest()
    return topic


def dead_letter_topic(queue: str) -> str:
    """Where a share queue's group copies the dead letters its host decides on (``maxlen``, ``delivery_limit``), for
    the dead-letter exchange: ``queue_topic(queue) + ".dead"`` (no queue topic holds a '.' past its prefix but the
    hashed form, which never ends so), hashed as ``queue_topic`` does when that is too long."""
    topic = queue_topic(queue) + DEAD_LETTER_TOPIC_SUFFIX
    if len(topic) > _TOPIC_NAME_LENGTH_MAX:
        digest = hashlib.sha256(queue.encode("utf-8", "surrogateescape")).hexdigest()
        topic = QUEUE_TOPIC_PREFIX + "h." + digest + DEAD_LETTER_TOPIC_SUFFIX
    return topic


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StoredMessage:
    """A message as an AMQP consumer receives it."""

    exchange: str
    routing_key: str
    properties_raw: bytes
    body: bytes


def append_message(
    builder: BatchBuilder, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes,
    body: bytes, expiration: str | None, extra_headers: Sequence[RecordHeader] = (),
) -> None:
    """Add one message record to a batch (``extra_headers`` after the AMQP ones: a share queue's ``x-delay``)."""
    key, headers = record_key_and_headers(exchange, routing_key, properties_raw, expiration, extra_headers)
    builder.append(timestamp_ms, key, body, headers)


def append_messages(
    builder: BatchBuilder, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes,
    bodies: Sequence[bytes], expiration: str | None, extra_headers: Sequence[RecordHeader] = (),
) -> None:
    """``append_message`` of messages alike but for their bodies, in order, with one call to the builder."""
    key, headers = record_key_and_headers(exchange, routing_key, properties_raw, expiration, extra_headers)
    builder.append_alike(timestamp_ms, key, bodies, headers)


def record_key_and_headers(exchange: str, routing_key: str, properties_raw: bytes, expiration: str | None,
                           extra_headers: Sequence[RecordHeader]) -> tuple[bytes, tuple[RecordHeader, ...]]:
    """A message's record key and headers, remembered (``_RECORD_HEADERS``)."""
    signature = (exchange, routing_key, properties_raw, expiration, extra_headers)
    try:
        return _RECORD_HEADERS[signature]
    except KeyError:  # new: built, and remembered unless large
        key, headers = _record_headers(*signature)
        if len(properties_raw) + len(key) + len(exchange) <= limits.amqp_decode_cache_key_bytes_max:
            remember(_RECORD_HEADERS, signature, (key, headers))
    except TypeError:  # an unhashable value (a bytearray, a list of headers): nothing to remember it by
        key, headers = _record_headers(*signature)
    return key, headers


#: (record key, headers tuple) by what ``append_message`` builds them from: a publisher sends one routing key and
#: one property list again and again, and the builder remembers a headers *tuple*'s encoded section (~3 us a
#: message less than encoding a fresh list of headers each time). Bounded as the codec's decode caches are.
_RECORD_HEADERS: dict[tuple[Any, ...], tuple[bytes, tuple[RecordHeader, ...]]] = {}


def _record_headers(exchange: str, routing_key: str, properties_raw: bytes, expiration: str | None,
                    extra_headers: Sequence[RecordHeader]) -> tuple[bytes, tuple[RecordHeader, ...]]:
    """A message's record key and headers."""
    key = routing_key.encode("utf-8", "surrogateescape")
    headers: tuple[RecordHeader, ...] = ((_EXCHANGE, exchange.encode("utf-8", "surrogateescape")), (_ROUTING_KEY, key),
                                         (_PROPERTIES, properties_raw))
    if expiration is not None:
        headers += ((_EXPIRATION, expiration.encode("utf-8", "surrogateescape")),)
    return key, headers + tuple(extra_headers)


def queued_message(
    offset: int, key: bytes | None, value: bytes | None, headers: tuple[RecordHeader, ...], timestamp_ms: int
) -> QueuedMessage:
    """A log record's parts (as ``decode_records_as`` hands them) → the queue's view, ``StoredMessage`` as payload."""
    if len(headers) >= 3 and headers[0][0] == _EXCHANGE and headers[1][0] == _ROUTING_KEY and headers[2][0] == _PROPERTIES:
        # What append_message writes, in its order: no dict needed.
        exchange, routing_key, properties_raw = headers[0][1], headers[1][1], headers[2][1]
        expiration = headers[3][1] if len(headers) > 3 and headers[3][0] == _EXPIRATION else None
    else:
        named = dict(headers)
        exchange, routing_key, properties_raw = named.get(_EXCHANGE), named.get(_ROUTING_KEY, key), named.get(_PROPERTIES)
        expiration = named.get(_EXPIRATION)
    message = StoredMessage(
        exchange=exchange.decode("utf-8", "surrogateescape") if exchange else "",
        routing_key=routing_key.decode("utf-8", "surrogateescape") if routing_key else "",
        properties_raw=properties_raw or EMPTY_PROPERTIES,
        body=value or b"",
    )
    return QueuedMessage(
        offset=offset, timestamp_ms=timestamp_ms,
        expiration_ms=parse_expiration(expiration.decode("ascii", "replace")) if expiration else None,
        payload=message,
    )


class MessageRow(NamedTuple):
    """A queue's message as its log record decodes with ``decoder.decode_rows`` (no Python call per record): it
    reads like a ``QueuedMessage`` (``offset``, ``timestamp_ms``, ``expiration_ms``, ``payload``), the last two
    worked out when asked; ``delivery_frames`` encodes its delivery from the raw fields."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[RecordHeader, ...]
    timestamp_ms: int

    @property
    def expiration_ms(self) -> int | None:
        """The message's own ``expiration``, in ms (None: it has none)."""
        return None if is_plain(self) else self.queued().expiration_ms

    @property
    def payload(self) -> StoredMessage:
        """The message as a consumer receives it."""
        return self.queued().payload  # type: ignore[no-any-return]

    def queued(self) -> QueuedMessage:
        """The queue's usual view of this record."""
        return queued_message(*self)


def is_plain(row: MessageRow) -> bool:
    """The record holds the three headers ``append_message`` writes and no other (so no expiration)."""
    headers = row.headers
    return (len(headers) == 3 and headers[0][0] == _EXCHANGE and headers[1][0] == _ROUTING_KEY
            and headers[2][0] == _PROPERTIES)


_HEADERS = operator.itemgetter(3)
_NAME = operator.itemgetter(0)
#: ``append_message``'s three headers by position, each as (its getter from a row's headers, its name).
_PLAIN_HEADERS = tuple((operator.itemgetter(index), {name}) for index, name in enumerate(
    (_EXCHANGE, _ROUTING_KEY, _PROPERTIES)))


def all_plain(rows: Sequence[MessageRow]) -> bool:
    """``is_plain`` of every row, with no Python call per row: a fetch's rows checked by a few passes in C."""
    headers = list(map(_HEADERS, rows))
    if set(map(len, headers)) - {3}:
        return False
    return all(set(map(_NAME, map(header_at, headers))) <= name for header_at, name in _PLAIN_HEADERS)


def _row_bytes(row: MessageRow) -> int:
    return len(row.value or b"") + sum(len(value or b"") for _, value in row.headers)


# --- declarations ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueueDeclaration:
    """A declared queue (an exclusive queue is stored only in a cluster, see ``exclusive``)."""

    name: str
    durable: bool = True
    auto_delete: bool = False
    arguments: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: A classic queue's home: the node id of the broker it was declared through, the only one serving its consumers
    #: (``queue_home.py``); None for other queues and for classic queues declared before queues had a home.
    home: int | None = None
    #: An exclusive queue declared in a cluster: stored so that publishes through other brokers reach it; it lives
    #: while its connection on its home broker does.
    exclusive: bool = False


def exchange_record(exchange: Exchange) -> tuple[bytes, bytes]:
    """(key, value) of a declared exchange."""
    value: dict[str, Any] = {"type": exchange.type.value, "durable": exchange.durable,
                             "auto-delete": exchange.auto_delete, "internal": exchange.internal,
                             "arguments": dict(exchange.arguments)}
    if exchange.home is not None:
        value["home"] = exchange.home
    return b"e:" + exchange.name.encode("utf-8", "surrogateescape"), fields.table(value)


def queue_record(queue: QueueDeclaration) -> tuple[bytes, bytes]:
    """(key, value) of a declared queue."""
    value: dict[str, Any] = {"durable": queue.durable, "auto-delete": queue.auto_delete,
                             "arguments": dict(queue.arguments)}
    if queue.home is not None:
        value["home"] = queue.home
    if queue.exclusive:
        value["exclusive"] = True
    return b"q:" + queue.name.encode("utf-8", "surrogateescape"), fields.table(value)


def binding_key(binding: Binding) -> bytes:
    """The metadata key of a binding (its whole identity)."""
    return b"b:" + fields.table({
        "source": binding.source, "destination": binding.destination, "kind": binding.destination_kind.value,
        "routing-key": binding.routing_key, "arguments": dict(binding.arguments),
    })


def queue_key(name: str) -> bytes:
    """The metadata key of a queue."""
    return b"q:" + name.encode("utf-8", "surrogateescape")


def exchange_key(name: str) -> bytes:
    """The metadata key of an exchange."""
    return b"e:" + name.encode("utf-8", "surrogateescape")


def _read_table(data: bytes) -> dict[str, Any]:
    return fields.Reader(data).table()


def _corrupt(key: bytes, problem: str) -> AmqpError:
    return AmqpError(ReplyCode.INTERNAL_ERROR, f"stored AMQP declaration {bytes(key[:60])!r}: {problem}")


def _entry(table: Mapping[str, Any], name: str, kind: type | tuple[type, ...], key: bytes) -> Any:
    """``table[name]``, checked to be a ``kind``; AmqpError otherwise."""
    value = table.get(name)
    if not isinstance(value, kind):
        raise _corrupt(key, f"'{name}' is {type(value).__name__}, not what the declaration writes")
    return value


def _enum_entry(table: Mapping[str, Any], name: str, kind: type[enum.Enum], key: bytes) -> Any:
    try:
        return kind(_entry(table, name, str, key))
    except ValueError:
        raise _corrupt(key, f"'{name}' {table[name]!r} is no {kind.__name__}") from None


def decode_declaration(key: bytes, value: bytes) -> Exchange | QueueDeclaration | Binding:
    """A metadata record (not a tombstone) → what it declares; AmqpError (and nothing else) if it does not parse."""
    kind, name = key[:2], key[2:].decode("utf-8", "surrogateescape")
    if kind == b"e:":
        table = _read_table(value)
        return Exchange(name=name, type=_enum_entry(table, "type", ExchangeType, key),
                        durable=bool(_entry(table, "durable", int, key)),
                        auto_delete=bool(_entry(table, "auto-delete", int, key)),
                        internal=bool(_entry(table, "internal", int, key)), arguments=_entry(table, "arguments", dict, key),
                        home=_entry(table, "home", int, key) if "home" in table else None)
    if kind == b"q:":
        table = _read_table(value)
        return QueueDeclaration(name=name, durable=bool(_entry(table, "durable", int, key)),
                                auto_delete=bool(_entry(table, "auto-delete", int, key)),
                                arguments=_entry(table, "arguments", dict, key),
                                home=_entry(table, "home", int, key) if "home" in table else None,
                                exclusive=bool(_entry(table, "exclusive", int, key)) if "exclusive" in table else False)
    if kind == b"b:":
        return decode_binding_key(key)
    raise _corrupt(key, "the key starts with none of 'e:', 'q:', 'b:'")


def decode_binding_key(key: bytes) -> Binding:
    """A ``b:`` metadata key → the binding; AmqpError (and nothing else) if it does not parse."""
    table = _read_table(key[2:])
    return Binding(source=_entry(table, "source", str, key), destination=_entry(table, "destination", str, key),
                   destination_kind=_enum_entry(table, "kind", DestinationKind, key),
                   routing_key=_entry(table, "routing-key", str, key),
                   arguments=tuple(sorted(_entry(table, "arguments", dict, key).items())))


class FetchBudgetSpent(Exception):
    """The batches decoded so far used up the fetch's decompression budget: the next fetch reads on from here."""


class DecompressionBudget:
    """What the batches of one fetch may decompress to together, so a few small compressed batches
    cannot expand to gigabytes in an AMQP reader. A batch that does not fit what is left raises
    ``FetchBudgetSpent`` (it may fit the next fetch's whole budget); one that does not fit a whole budget
    raises ``CorruptRecordError`` (a bomb)."""

    def __init__(self, bytes_max: int | None = None) -> None:
        self.bytes_max = limits.amqp_fetch_decompressed_bytes_max if bytes_max is None else bytes_max
        self.remaining_bytes = self.bytes_max

    def decode(self, batch: memoryview, header: Any, make: Callable[..., T], size_of: Callable[[T], int]) -> list[T]:
        """``decode_records_as(batch, make)`` within what is left; ``size_of`` measures a decoded record."""
        return self._decode(batch, header, lambda data, bytes_max: decode_records_as(
            data, make, decompressed_bytes_max=bytes_max), size_of)

    def decode_rows(self, batch: memoryview, header: Any) -> list[MessageRow]:
        """The batch's records as ``MessageRow``s (``decoder.decode_rows``) within what is left."""
        return self._decode(batch, header, lambda data, bytes_max: decode_rows(
            data, MessageRow, (), decompressed_bytes_max=bytes_max), _row_bytes)

    def _decode(self, batch: memoryview, header: Any, decode: Callable[[memoryview, int], list[T]],
                size_of: Callable[[T], int]) -> list[T]:
        if not header.compression:  # uncompressed: its records are no larger than the fetched bytes
            return decode(batch, DECOMPRESSED_BYTES_MAX)
        batch_bytes_max = min(DECOMPRESSED_BYTES_MAX, self.bytes_max)
        allowed_bytes = max(0, min(batch_bytes_max, self.remaining_bytes))
        try:
            decoded = decode(batch, allowed_bytes)
        except CorruptRecordError:
            if allowed_bytes < batch_bytes_max:
                raise FetchBudgetSpent() from None
            raise
        self.remaining_bytes -= sum(size_of(item) for item in decoded)
        return decoded
