# -*- test-case-name: tests.unit.protocols.amqp.test_delivery_frames -*-
"""The basic.deliver frames of many stored messages at once, straight from their decoded log records. Pure.

A share queue's consumer is handed the records a fetch leased as rows (``stored.MessageRow``, decoded by the
compiled records decoder with no Python call per record); ``encode_deliveries`` turns a list of them into the
method, content-header and body frames of one basic.deliver each, numbered with consecutive delivery tags, as
one bytes object. The exchange, routing key and property list are taken from the record's headers as the raw
bytes the publisher sent (``stored.append_message``): nothing is decoded to ``str`` and encoded again.

``_delivery_frames.c`` (built by setup.py as ``mqbroker.protocols.amqp._delivery_frames``) is a port of
``encode_deliveries_python``: same arguments, same bytes, the same ``ValueError`` for a name longer than a
shortstr. It is used when built; this module stays the specification, and
``tests/unit/protocols/amqp/test_delivery_frames.py`` checks the compiled encoder against it with hypothesis.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from mqbroker.protocols.amqp.codec import encode_deliver_raw
from mqbroker.protocols.amqp.stored import STORED_LAYOUT

#: (exchange header, routing-key header, properties header, the property list of a message without one).
Layout = tuple[str, str, str, bytes]


def delivery_fields(row: Sequence[Any], layout: Layout) -> tuple[bytes, bytes, bytes, bytes]:
    """(exchange, routing key, property list, body) of a record row, as ``stored.queued_message`` reads them."""
    exchange_name, routing_key_name, properties_name, empty_properties = layout
    headers = row[3]
    if (len(headers) >= 3 and headers[0][0] == exchange_name and headers[1][0] == routing_key_name
            and headers[2][0] == properties_name):
        exchange, routing_key, properties_raw = headers[0][1], headers[1][1], headers[2][1]
    else:  # a record not written by append_message (produced natively): the last header of each name counts
        named = dict(headers)
        exchange, routing_key, properties_raw = (named.get(exchange_name), named.get(routing_key_name, row[1]),
                                                 named.get(properties_name))
    return exchange or b"", routing_key or b"", properties_raw or empty_properties, row[2] or b""


def encode_deliveries_python(rows: Sequence[Sequence[Any]], redelivered: Collection[int], channel: int,
                             consumer_tag: bytes, first_delivery_tag: int, frame_max: int,
                             layout: Layout = STORED_LAYOUT) -> bytes:
    """basic.deliver frames of ``rows`` (``(offset, key, value, headers, ...)``), delivery tags counting from
    ``first_delivery_tag``; a row whose offset is in ``redelivered`` is flagged so. ``consumer_tag`` is encoded
    already (a shortstr). An exchange or routing key over 255 bytes raises ``ValueError``."""
    parts = []
    for index, row in enumerate(rows):
        exchange, routing_key, properties_raw, body = delivery_fields(row, layout)
        parts.append(encode_deliver_raw(channel, consumer_tag, first_delivery_tag + index, row[0] in redelivered,
                                        exchange, routing_key, properties_raw, body, frame_max))
    return b"".join(parts)


try:
    from mqbroker.protocols.amqp._delivery_frames import encode_deliveries
except ImportError:  # built without a C compiler: the reference, slower but the same bytes
    encode_deliveries = encode_deliveries_python

#: True when deliveries are encoded by the compiled encoder.
COMPILED_DELIVERY_ENCODER = encode_deliveries is not encode_deliveries_python
