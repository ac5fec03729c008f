"""Frames, headers and the request/response codec of the native protocol (pure, both roles).

A request frame is ``RequestHeader`` then the request body; a response frame is
``correlation_id int32, error_code int16, error_message string?`` (the envelope) then, only
when ``error_code`` is 0, the response body. A non-zero envelope code fails the whole request
(unknown API key, unsupported version, malformed request, not coordinator, ...); it decodes to
``ErrorResponse`` for any API, so a client can always read it. Per-partition outcomes live in
the response bodies. Every function here returns or takes whole frames (length prefix
included on the way out, excluded on the way in, as ``LengthPrefixedFrames`` yields them).
"""

from __future__ import annotations

import struct
from typing import Any

from mqbroker.errors import BrokerError, ErrorCode
from mqbroker.protocols.exceptions import (
    LocalProtocolError,
    MalformedMessageError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from mqbroker.protocols.native.messages import (
    API_KEY_OF_REQUEST,
    APIS,
    Acks,
    ApiKey,
    ApiVersionRange,
    ApiVersionsResponse,
    ProduceRequest,
)
from mqbroker.protocols.schema import (
    DECODING_ERRORS,
    ENCODING_ERRORS,
    Int16,
    Int32,
    MessageCodec,
    compile_message,
    decode_exactly,
    decode_value,
    encode_into,
    malformed,
    message,
    trailing,
    unencodable,
)

# Bound here, not imported: see docs/architecture.md, "Hot paths".
_APIS = APIS

_INT32 = struct.Struct(">i")


@message
class RequestHeader:
    """Starts every request frame; ``api_key`` is an ``ApiKey`` once the codec knows it."""

    api_key: Int16
    api_version: Int16
    correlation_id: Int32
    client_id: str


@message
class ErrorResponse:
    """The whole request failed: the envelope's code and message, and no body (any API)."""

    error_code: Int16
    error_message: str | None = None


@message
class _ResponseEnvelope:
    """Starts every response frame."""

    correlation_id: Int32
    error_code: Int16
    error_message: str | None


#: ApiKey by number (a dict lookup costs a fraction of calling the enum, on every request).
_API_KEYS: dict[int, ApiKey] = {int(key): key for key in ApiKey}
_HEADER = compile_message(RequestHeader)
_ENVELOPE = compile_message(_ResponseEnvelope)
#: ``_ENVELOPE`` of an answer without an error (correlation id, error code 0, no message), packed in one call.
_SUCCESS_ENVELOPE = struct.Struct(">ihh")
#: (API, version) -> codec: a message travels in each version with the fields ``wire(since=...)`` gives it.
_REQUEST_CODECS: dict[tuple[ApiKey, int], MessageCodec] = {
    (key, version): compile_message(api.request_type, version)
    for key, api in _APIS.items() for version in range(api.min_version, api.max_version + 1)
}
#: What a malformed request is called in its error ("Produce request"), not formatted for every request.
_REQUEST_NAMES: dict[ApiKey, str] = {key: f"{key.name} request" for key in _APIS}
_RESPONSE_CODECS: dict[tuple[ApiKey, int], MessageCodec] = {
    (key, version): compile_message(api.response_type, version)
    for key, api in _APIS.items() for version in range(api.min_version, api.max_version + 1)
}


def _framed(parts: list[bytes | memoryview]) -> bytes:
    """Join ``parts`` (whose first element is a placeholder) behind a 4-byte length, copying once."""
    parts[0] = _INT32.pack(sum(map(len, parts)))
    return b"".join(parts)


def _check_version(api_key: ApiKey, version: int) -> bool:
    """Whether this codec speaks ``version`` of ``api_key``."""
    api = APIS[api_key]
    return api.min_version <= version <= api.max_version


def api_key_of(request: Any) -> ApiKey:
    """The API a request object belongs to."""
    try:
        return API_KEY_OF_REQUEST[type(request)]
    except KeyError:
        raise LocalProtocolError(f"{type(request).__name__} is not a native-protocol request") from None


def expects_response(request: Any) -> bool:
    """False only for a Produce with ``acks == 0``, which the broker never answers."""
    return not (isinstance(request, ProduceRequest) and request.acks == Acks.NONE)


def encode_request(api_key: ApiKey, version: int, correlation_id: int, client_id: str, request: Any) -> bytes:
    """A complete request frame (length prefix included)."""
    if type(request) is not APIS[api_key].request_type:
        raise LocalProtocolError(f"{type(request).__name__} is not a {api_key.name} request")
    if not _check_version(api_key, version):
        raise LocalProtocolError(f"version {version} of {api_key.name} is not supported by this codec")
    parts: list[bytes | memoryview] = [b""]
    header = RequestHeader(api_key=api_key, api_version=version, correlation_id=correlation_id, client_id=client_id)
    encode_into(_HEADER, header, parts)
    encode_into(_REQUEST_CODECS[api_key, version], request, parts)
    return _framed(parts)


def decode_request(body: bytes) -> tuple[RequestHeader, Any]:
    """Decode a request frame body (without its length prefix).

    Raises ``UnknownApiKeyError`` or ``UnsupportedVersionError`` (the frame is intact: answer it
    and carry on) or ``MalformedMessageError``; each carries the header when it could be read,
    so the reply can name the right correlation id.
    """
    # The try blocks of ``decode_value`` and ``decode_exactly`` written out: two calls fewer on every request.
    view = memoryview(body)
    try:
        raw_header, position = _HEADER.decode(view, 0)
    except DECODING_ERRORS as error:
        raise malformed(error, "request header") from None
    api_key = _API_KEYS.get(raw_header.api_key)
    if api_key is None:
        raise UnknownApiKeyError(
            f"API key {raw_header.api_key} is unknown; ask ApiVersions which APIs the broker supports",
            raw_header,
        )
    header = RequestHeader(
        api_key=api_key,
        api_version=raw_header.api_version,
        correlation_id=raw_header.correlation_id,
        client_id=raw_header.client_id,
    )
    codec = _REQUEST_CODECS.get((api_key, header.api_version))
    if codec is None:
        api = APIS[api_key]
        raise UnsupportedVersionError(
            f"{api_key.name} version {header.api_version} is not supported; "
            f"this broker speaks versions {api.min_version} to {api.max_version}",
            header,
        )
    try:
        request, end = codec.decode(view, position)
        if end != len(view):
            raise trailing(_REQUEST_NAMES[api_key], len(view) - end)
    except DECODING_ERRORS as error:
        failure = malformed(error, _REQUEST_NAMES[api_key])
        failure.header = header
        raise failure from None
    except MalformedMessageError as error:
        error.header = header
        raise
    return header, request


def error_response(error: BrokerError) -> ErrorResponse:
    """The envelope-level answer to a request that failed as a whole with ``error``."""
    return ErrorResponse(error_code=error.code, error_message=error.message)


def encode_response(correlation_id: int, api_key: int, version: int, response: Any) -> bytes:
    """A complete response frame; an ``ErrorResponse`` is accepted for any API key and version."""
    parts: list[bytes | memoryview] = [b""]
    if type(response) is ErrorResponse:
        assert response.error_code != ErrorCode.NONE, "an ErrorResponse must carry an error"
        envelope = _ResponseEnvelope(
            correlation_id=correlation_id, error_code=response.error_code, error_message=response.error_message
        )
        encode_into(_ENVELOPE, envelope, parts)
        return _framed(parts)
    known_key = _API_KEYS[api_key]
    if type(response) is not APIS[known_key].response_type:
        raise LocalProtocolError(f"{type(response).__name__} is not a {known_key.name} response")
    codec = _RESPONSE_CODECS.get((known_key, version))
    assert codec is not None, "answering a version the codec refused"
    parts.append(_SUCCESS_ENVELOPE.pack(correlation_id, 0, -1))
    try:  # ``encode_into`` written out: a call fewer on every response
        codec.encode(response, parts)
    except ENCODING_ERRORS as error:
        raise unencodable(response, error) from None
    return _framed(parts)


def decode_response(api_key: ApiKey, version: int, body: bytes) -> tuple[int, Any]:
    """Decode a response frame body to ``(correlation_id, response or ErrorResponse)``.

    ``api_key`` and ``version`` are those of the request it answers. Raises
    ``MalformedMessageError`` for anything that is not a well-formed response.
    """
    if not _check_version(api_key, version):
        raise LocalProtocolError(f"version {version} of {api_key.name} is not supported by this codec")
    view = memoryview(body)
    envelope, position = decode_value(_ENVELOPE, view, 0, "response envelope")
    if envelope.error_code != ErrorCode.NONE:
        if position != len(view):
            raise MalformedMessageError(f"error response has {len(view) - position} trailing bytes")
        return envelope.correlation_id, ErrorResponse(
            error_code=envelope.error_code, error_message=envelope.error_message
        )
    response = decode_exactly(_RESPONSE_CODECS[api_key, version], view, position, f"{api_key.name} response")
    return envelope.correlation_id, response


def peek_correlation_id(body: bytes) -> int:
    """The correlation id of a response frame body, read before knowing which request it answers."""
    if len(body) < 4:
        raise MalformedMessageError(f"response of {len(body)} bytes is too short to hold a correlation id")
    return int(_INT32.unpack_from(body, 0)[0])


def supported_api_versions() -> ApiVersionsResponse:
    """The ApiVersions answer describing this codec."""
    return ApiVersionsResponse(
        api_keys=tuple(
            ApiVersionRange(api_key=key, min_version=api.min_version, max_version=api.max_version)
            for key, api in sorted(_APIS.items())
        )
    )
