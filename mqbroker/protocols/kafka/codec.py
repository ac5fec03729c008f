"""Kafka request and response frames: headers, per-version bodies and the ApiVersions fallback (pure, both roles).

A request frame is a request header then the body; its header is version 1 (api key, version,
correlation id, nullable client id) in non-flexible versions and version 2 (the same plus a
tagged-field section) in flexible ones. A response frame is a response header, version 0
(correlation id) or 1 (plus tagged fields), then the body. ApiVersions responses always use
header version 0, so that a client can read the answer whatever version it asked with.

Unlike the native protocol there is no error envelope: every error travels in the response
body, and a request that cannot be decoded closes the connection (as Kafka does). The one
exception is KIP-511: an ApiVersions request of a version the broker does not speak is answered
with a version-0 body carrying UNSUPPORTED_VERSION and the supported ranges, so the client can
retry with a version both sides speak.
"""

from __future__ import annotations

import struct
from typing import Any

from mqbroker.errors import ErrorCode
from mqbroker.protocols.exceptions import (
    LocalProtocolError,
    MalformedMessageError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from mqbroker.protocols.kafka.messages.apis import (
    APIS,
    FINALIZED_FEATURES_EPOCH,
    TRANSACTION_VERSION,
    TRANSACTION_VERSION_FEATURE,
    ApiKey,
    KafkaApi,
)
from mqbroker.protocols.kafka.messages.cluster import (
    ApiVersion,
    ApiVersionsResponse,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)
from mqbroker.protocols.schema import (
    Int16,
    Int32,
    MessageCodec,
    compile_message,
    decode_exactly,
    decode_value,
    encode_into,
    message,
)

# Bound here, not imported: see docs/architecture.md, "Hot paths".
_APIS = APIS

_INT32 = struct.Struct(">i")


@message
class RequestHeader:
    """Starts every request (header version 1; version 2 adds a tagged-field section)."""

    api_key: Int16
    api_version: Int16
    correlation_id: Int32
    client_id: str | None


@message
class ResponseHeader:
    """Starts every response (version 0; version 1, the flexible one, adds a tagged-field section)."""

    correlation_id: Int32


@message
class _TaggedFieldsOnly:
    """The tagged-field section that ends a version 2 request header."""


#: ApiKey by number (a dict lookup costs a fraction of calling the enum, on every request).
_API_KEYS: dict[int, ApiKey] = {int(key): key for key in ApiKey}
_REQUEST_HEADER = compile_message(RequestHeader)
_HEADER_TAGS = compile_message(_TaggedFieldsOnly, 0, flexible=True)
_RESPONSE_HEADERS = {False: compile_message(ResponseHeader), True: compile_message(ResponseHeader, 0, flexible=True)}


def _request_codec(api: KafkaApi, version: int) -> MessageCodec:
    return compile_message(api.request_type, version, api.flexible(version))


def _response_codec(api: KafkaApi, version: int) -> MessageCodec:
    return compile_message(api.response_type, version, api.flexible(version))


def _framed(parts: list[bytes | memoryview]) -> bytes:
    """Join ``parts`` (whose first element is a placeholder) behind a 4-byte length, copying once."""
    parts[0] = _INT32.pack(sum(map(len, parts)))
    return b"".join(parts)


def _response_header_flexible(api: KafkaApi, version: int) -> bool:
    """Response header version 1 in flexible versions, except for ApiVersions (always version 0)."""
    return api.key != ApiKey.API_VERSIONS and api.flexible(version)


def api_versions_response(error_code: int = 0) -> ApiVersionsResponse:
    """The ApiVersions answer: every served API with its advertised range, and the finalized features (version 3+:
    ``transaction.version`` 2, so Kafka 4 clients use KIP-890 part 2 transactions)."""
    return ApiVersionsResponse(error_code=error_code, api_keys=tuple(
        ApiVersion(api_key=key, min_version=api.min_version, max_version=api.max_version)
        for key, api in sorted(_APIS.items())
    ), supported_features=(SupportedFeatureKey(name=TRANSACTION_VERSION_FEATURE, min_version=0,
                                               max_version=TRANSACTION_VERSION),),
        finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
        finalized_features=(FinalizedFeatureKey(name=TRANSACTION_VERSION_FEATURE, max_version_level=TRANSACTION_VERSION,
                                                min_version_level=TRANSACTION_VERSION),))


# -- the broker's side ------------------------------------------------------------------------


def decode_request(body: bytes) -> tuple[RequestHeader, Any]:
    """Decode a request frame body (without its length prefix) into its header and request.

    Raises ``UnknownApiKeyError``, ``UnsupportedVersionError`` or ``MalformedMessageError``; each
    carries the header when it could be read. The header's ``api_key`` is an ``ApiKey``.
    """
    view = memoryview(body)
    raw_header, position = decode_value(_REQUEST_HEADER, view, 0, "request header")
    api_key = _API_KEYS.get(raw_header.api_key)
    if api_key is None or api_key not in APIS:
        raise UnknownApiKeyError(f"API key {raw_header.api_key} is not served; ApiVersions lists the served APIs",
                                 raw_header)
    header = RequestHeader(api_key=api_key, api_version=raw_header.api_version,
                           correlation_id=raw_header.correlation_id, client_id=raw_header.client_id)
    api = APIS[api_key]
    if not api.speaks(header.api_version):
        raise UnsupportedVersionError(
            f"{api_key.name} version {header.api_version} is not served; versions {api.min_version} to "
            f"{api.max_version} are", header)
    try:
        if api.flexible(header.api_version):
            _, position = decode_value(_HEADER_TAGS, view, position, "request header tagged fields")
        # Bytes after the request are ignored, as Kafka's own broker ignores them (librdkafka sends one
        # extra byte after AlterUserScramCredentials).
        request, _ = decode_value(_request_codec(api, header.api_version), view, position,
                                  f"{api_key.name} v{header.api_version} request")
    except MalformedMessageError as error:
        error.header = header
        raise
    return header, request


def encode_response(header: RequestHeader, response: Any) -> bytes:
    """The complete response frame (length prefix included) answering the request with ``header``."""
    api = APIS[header.api_key]
    if type(response) is not api.response_type:
        raise LocalProtocolError(f"{type(response).__name__} is not a {api.key.name} response")
    parts: list[bytes | memoryview] = [b""]
    encode_into(_RESPONSE_HEADERS[_response_header_flexible(api, header.api_version)],
                ResponseHeader(correlation_id=header.correlation_id), parts)
    encode_into(_response_codec(api, header.api_version), response, parts)
    return _framed(parts)


def encode_unsupported_api_versions(correlation_id: int) -> bytes:
    """KIP-511: the version-0 ApiVersions answer to an ApiVersions request of an unserved version."""
    parts: list[bytes | memoryview] = [b""]
    encode_into(_RESPONSE_HEADERS[False], ResponseHeader(correlation_id=correlation_id), parts)
    encode_into(_response_codec(APIS[ApiKey.API_VERSIONS], 0), api_versions_response(ErrorCode.UNSUPPORTED_VERSION), parts)
    return _framed(parts)


# -- a client's side (tests, benchmarks) --------------------------------------------------------


def encode_request(api_key: ApiKey, version: int, correlation_id: int, client_id: str | None, request: Any) -> bytes:
    """A complete request frame (length prefix included)."""
    api = _APIS.get(api_key)
    if api is None or type(request) is not api.request_type:
        raise LocalProtocolError(f"{type(request).__name__} is not a {api_key.name} request")
    if not api.speaks(version):
        raise LocalProtocolError(f"version {version} of {api_key.name} is not served by this codec")
    parts: list[bytes | memoryview] = [b""]
    header = RequestHeader(api_key=api_key, api_version=version, correlation_id=correlation_id, client_id=client_id)
    encode_into(_REQUEST_HEADER, header, parts)
    if api.flexible(version):
        encode_into(_HEADER_TAGS, _TaggedFieldsOnly(), parts)
    encode_into(_request_codec(api, version), request, parts)
    return _framed(parts)


def decode_response(api_key: ApiKey, version: int, body: bytes) -> tuple[int, Any]:
    """Decode a response frame body to ``(correlation_id, response)``; ``version`` is the request's.

    Raises ``MalformedMessageError`` for anything that is not a well-formed response.
    """
    api = APIS[api_key]
    if not api.speaks(version):
        raise LocalProtocolError(f"version {version} of {api_key.name} is not served by this codec")
    view = memoryview(body)
    header, position = decode_value(_RESPONSE_HEADERS[_response_header_flexible(api, version)], view, 0,
                                    "response header")
    response = decode_exactly(_response_codec(api, version), view, position, f"{api_key.name} v{version} response")
    return header.correlation_id, response
