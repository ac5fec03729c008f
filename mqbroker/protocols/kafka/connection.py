"""A sans-I/O Kafka server connection: bytes in, requests out, responses back in request order.

Kafka clients match responses to requests by position, not only by correlation id: a response
that overtakes an earlier one makes them close the connection. Requests are therefore numbered
as they arrive and their responses leave strictly in that order, whichever finishes first;
``data_to_send`` releases the answered prefix. A Produce with ``acks=0`` is never answered and
takes no place in the order. ApiVersions is answered here, from the codec's table, including
the KIP-511 fallback for versions the broker does not speak.

A peer that breaks the protocol yields a final ``ConnectionFailed`` and moves the connection to
``ConnectionState.FAILED``; bytes received afterwards are discarded, since the caller is closing it.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any

from mqbroker import limits
from mqbroker.protocols.exceptions import FrameTooLargeError, ProtocolError, UnsupportedVersionError
from mqbroker.protocols.framing import FrameTooLarge, LengthPrefixedFrames
from mqbroker.protocols.kafka.codec import (
    RequestHeader,
    api_versions_response,
    decode_request,
    encode_response,
    encode_unsupported_api_versions,
)
from mqbroker.protocols.kafka.messages.apis import ApiKey
from mqbroker.protocols.kafka.messages.produce_fetch import ProduceRequest
from mqbroker.protocols.schema import message


class ConnectionState(enum.Enum):
    """Whether a connection still accepts bytes."""

    OPEN = "open"
    FAILED = "failed"


@message
class RequestReceived:
    """A well-formed request; answer it with ``respond(sequence, ...)`` unless ``sequence`` is None (acks=0)."""

    sequence: int | None
    header: RequestHeader
    request: Any


@message
class ConnectionFailed:
    """The peer broke the protocol; close the connection once ``data_to_send`` is written."""

    error: ProtocolError


class ServerConnection:
    """The broker's side of one Kafka connection."""

    def __init__(self, frame_bytes_max: int = limits.kafka_request_bytes_max) -> None:
        self._frames = LengthPrefixedFrames(frame_bytes_max)
        self.state = ConnectionState.OPEN
        #: Requests awaiting their turn to be answered, oldest first: [header, frame or None].
        self._slots: deque[list[Any]] = deque()
        self._first_sequence = 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes of a request frame received so far but not yet complete."""
        return self._frames.buffered_bytes

    @property
    def unanswered_requests(self) -> int:
        """Requests received whose responses have not left yet (answered or not)."""
        return len(self._slots)

    def receive_data(self, data: bytes) -> list[RequestReceived | ConnectionFailed]:
        """Feed received bytes; return the requests they complete, in order."""
        if self.state is ConnectionState.FAILED:
            return []
        events: list[RequestReceived | ConnectionFailed] = []
        try:
            frames = self._frames.feed(data)
        except FrameTooLarge as error:
            return self._fail(events, FrameTooLargeError(f"request {error}; the connection is closed"))
        for body in frames:
            try:
                header, request = decode_request(body)
            except UnsupportedVersionError as error:
                if error.header.api_key != ApiKey.API_VERSIONS:
                    return self._fail(events, error)
                self._slots.append([error.header, encode_unsupported_api_versions(error.header.correlation_id)])
                continue
            except ProtocolError as error:
                return self._fail(events, error)
            if header.api_key == ApiKey.API_VERSIONS:
                self._slots.append([header, encode_response(header, api_versions_response())])
            elif type(request) is ProduceRequest and request.acks == 0:
                events.append(RequestReceived(sequence=None, header=header, request=request))
            else:
                sequence = self._first_sequence + len(self._slots)
                self._slots.append([header, None])
                events.append(RequestReceived(sequence=sequence, header=header, request=request))
        return events

    def _fail(self, events: list[Any], error: ProtocolError) -> list[Any]:
        """Enter the terminal state; the failure is the last event."""
        self.state = ConnectionState.FAILED
        events.append(ConnectionFailed(error=error))
        return events

    def respond(self, sequence: int, response: Any) -> None:
        """Answer request ``sequence``; it leaves once every earlier request has been answered."""
        slot = self._slots[sequence - self._first_sequence]
        assert slot[1] is None, f"request {sequence} answered twice"
        slot[1] = encode_response(slot[0], response)

    def data_to_send(self) -> bytes:
        """The responses that may leave now, in request order (empty while the oldest is unanswered)."""
        ready = []
        slots = self._slots
        while slots and slots[0][1] is not None:
            ready.append(slots.popleft()[1])
        self._first_sequence += len(ready)
        return b"".join(ready)
