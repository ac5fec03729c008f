"""Sans-I/O native-protocol connections: bytes in, events out, reply bytes back (h2 style).

``ServerConnection`` is what the broker's adapter drives; ``ClientConnection`` is what the
Twisted and blocking clients drive. Neither holds a socket, a reactor or a clock. A peer that
breaks the protocol yields a final ``ConnectionFailed`` event and moves the connection to
``ConnectionState.FAILED``; bytes received afterwards are discarded, since the caller is
closing the connection.
"""

from __future__ import annotations

import enum
from typing import Any

from mqbroker import limits
from mqbroker.errors import BrokerError
from mqbroker.protocols.framing import FrameTooLarge, LengthPrefixedFrames
from mqbroker.protocols.native.codec import (
    RequestHeader,
    api_key_of,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    error_response,
    expects_response,
    peek_correlation_id,
)
from mqbroker.protocols.exceptions import (
    FrameTooLargeError,
    LocalProtocolError,
    MalformedMessageError,
    ProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from mqbroker.protocols.native.messages import APIS, ApiKey, ApiVersionsResponse
from mqbroker.protocols.schema import message

_CORRELATION_ID_MAX = 2**31 - 1


class ConnectionState(enum.Enum):
    """Whether a connection still accepts bytes."""

    OPEN = "open"
    FAILED = "failed"


@message
class RequestReceived:
    """A well-formed request; answer it with ``ServerConnection.reply`` (unless it expects none)."""

    header: RequestHeader
    request: Any


@message
class RequestRejected:
    """A request for an unknown API or version; answer with ``reply_error`` and keep serving."""

    header: RequestHeader
    error: ProtocolError


@message
class ResponseReceived:
    """The response to the request sent with ``correlation_id`` (possibly an ``ErrorResponse``)."""

    correlation_id: int
    api_key: ApiKey
    response: Any


@message
class ConnectionFailed:
    """The peer broke the protocol; the connection must be closed.

    On the server, ``error.header`` is set when the request header could be read: reply with
    ``reply_error`` before closing so the client learns why.
    """

    error: ProtocolError


class ServerConnection:
    """The broker's side of one native connection."""

    def __init__(self, frame_bytes_max: int = limits.native_frame_bytes_max) -> None:
        self._frames = LengthPrefixedFrames(frame_bytes_max)
        self.state = ConnectionState.OPEN
        #: Requests received that still await a reply (the adapter stops reading at a bound).
        self.inflight_requests = 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes of a request frame received so far but not yet complete."""
        return self._frames.buffered_bytes

    def allow_frames_up_to(self, frame_bytes_max: int) -> None:
        """Change the request frame bound (the server starts small until the client authenticates)."""
        self._frames.allow_frames_up_to(frame_bytes_max)

    def receive_data(self, data: bytes) -> list[RequestReceived | RequestRejected | ConnectionFailed]:
        """Feed received bytes; return the requests they complete."""
        if self.state is ConnectionState.FAILED:
            return []
        events: list[RequestReceived | RequestRejected | ConnectionFailed] = []
        try:
            frames = self._frames.feed(data)
        except FrameTooLarge as error:
            return self._fail(events, FrameTooLargeError(f"request {error}; the connection is closed"))
        for body in frames:
            try:
                header, request = decode_request(body)
            except (UnknownApiKeyError, UnsupportedVersionError) as error:
                assert error.header is not None
                self.inflight_requests += 1
                events.append(RequestRejected(header=error.header, error=error))
                continue
            except MalformedMessageError as error:
                return self._fail(events, error)
            if expects_response(request):
                self.inflight_requests += 1
            events.append(RequestReceived(header=header, request=request))
        return events

    def _fail(self, events: list[Any], error: ProtocolError) -> list[Any]:
        """Enter the terminal state; the failure is the last event."""
        self.state = ConnectionState.FAILED
        if error.header is not None:
            self.inflight_requests += 1  # the caller may still answer this one before closing
        events.append(ConnectionFailed(error=error))
        return events

    def reply(self, header: RequestHeader, response: Any) -> bytes:
        """The response frame answering the request with ``header`` (an ``ErrorResponse`` too)."""
        assert self.inflight_requests > 0, "replying to a request that was not received"
        self.inflight_requests -= 1
        return encode_response(header.correlation_id, header.api_key, header.api_version, response)

    def reply_error(self, header: RequestHeader, error: BrokerError) -> bytes:
        """The response frame failing the whole request with ``error``'s code and message."""
        return self.reply(header, error_response(error))


class ClientConnection:
    """A client's side of one native connection: numbers requests, matches responses."""

    def __init__(
        self,
        client_id: str,
        frame_bytes_max: int = limits.native_response_frame_bytes_max,
        inflight_requests_max: int = limits.native_inflight_requests_max,
    ) -> None:
        self.client_id = client_id
        self.state = ConnectionState.OPEN
        self._frames = LengthPrefixedFrames(frame_bytes_max)
        self._inflight_requests_max = inflight_requests_max
        self._inflight: dict[int, tuple[ApiKey, int]] = {}
        self._next_correlation_id = 0
        self._versions: dict[ApiKey, int] = {key: api.max_version for key, api in APIS.items()}

    @property
    def inflight_correlation_ids(self) -> tuple[int, ...]:
        """Requests sent and not yet answered (to fail them if the connection drops)."""
        return tuple(self._inflight)

    def use_broker_versions(self, response: ApiVersionsResponse) -> None:
        """Send each API at the highest version both sides speak; drop APIs with no common version."""
        broker_ranges = {entry.api_key: entry for entry in response.api_keys}
        for key, api in APIS.items():
            broker = broker_ranges.get(key)
            if broker is None or broker.max_version < api.min_version or broker.min_version > api.max_version:
                self._versions.pop(key, None)
            else:
                self._versions[key] = min(api.max_version, broker.max_version)

    def version_of(self, api_key: ApiKey) -> int | None:
        """The version ``api_key`` is sent at (None: the broker speaks none this client does)."""
        return self._versions.get(api_key)

    def send_request(self, request: Any) -> tuple[int, bytes]:
        """Number ``request``; return its correlation id and the frame to write."""
        if self.state is ConnectionState.FAILED:
            raise LocalProtocolError("the connection has failed; open a new one")
        api_key = api_key_of(request)
        version = self._versions.get(api_key)
        if version is None:
            raise LocalProtocolError(f"the broker supports no version of {api_key.name} this client speaks")
        if len(self._inflight) >= self._inflight_requests_max:
            raise LocalProtocolError(f"{len(self._inflight)} requests are in flight; wait for responses first")
        correlation_id = self._next_correlation_id
        assert correlation_id not in self._inflight, "correlation id reused while in flight"
        self._next_correlation_id = 0 if correlation_id == _CORRELATION_ID_MAX else correlation_id + 1
        data = encode_request(api_key, version, correlation_id, self.client_id, request)
        if expects_response(request):
            self._inflight[correlation_id] = (api_key, version)
        return correlation_id, data

    def receive_data(self, data: bytes | memoryview) -> list[ResponseReceived | ConnectionFailed]:
        """Feed received bytes; return the responses they complete, in arrival order."""
        if self.state is ConnectionState.FAILED:
            return []
        events: list[ResponseReceived | ConnectionFailed] = []
        try:
            frames = self._frames.feed(data)
        except FrameTooLarge as error:
            return self._fail(events, FrameTooLargeError(f"response {error}"))
        for body in frames:
            try:
                events.append(self._decode(body))
            except MalformedMessageError as error:
                return self._fail(events, error)
        return events

    def _decode(self, body: bytes) -> ResponseReceived:
        """Match a response frame to its request and decode it."""
        correlation_id = peek_correlation_id(body)
        pending = self._inflight.pop(correlation_id, None)
        if pending is None:
            raise MalformedMessageError(f"response to correlation id {correlation_id}, which is not in flight")
        api_key, version = pending
        _, response = decode_response(api_key, version, body)
        return ResponseReceived(correlation_id=correlation_id, api_key=api_key, response=response)

    def _fail(self, events: list[Any], error: ProtocolError) -> list[Any]:
        """Enter the terminal state; the failure is the last event."""
        self.state = ConnectionState.FAILED
        events.append(ConnectionFailed(error=error))
        return events

