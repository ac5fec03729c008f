"""Failures of the binary request/response codecs (native and Kafka), each carrying its wire error code.

A *peer* that breaks a protocol raises a ``ProtocolError`` (a ``BrokerError``: one connection
is answered or closed, the broker keeps serving the others). Each concrete class is also the
``mqbroker.errors`` class of its code, so ``except errors.MalformedRequestError`` catches a
``MalformedMessageError`` too. Code that tries to *send* something the protocol cannot carry
raises ``LocalProtocolError``.
"""

from __future__ import annotations

from typing import Any

from mqbroker import errors


class ProtocolError(errors.BrokerError):
    """The peer sent bytes that are not a valid message of the protocol it speaks."""

    def __init__(self, message: str, header: Any = None) -> None:
        super().__init__(message)
        #: The request header, when it could be read: the server answers with its correlation id.
        self.header = header


class MalformedMessageError(ProtocolError, errors.MalformedRequestError):
    """A frame is truncated, has trailing bytes, or holds an impossible value."""

    code = errors.ErrorCode.MALFORMED_REQUEST


class UnknownApiKeyError(ProtocolError, errors.UnknownApiKeyError):
    """A request names an API key this codec does not know."""

    code = errors.ErrorCode.UNKNOWN_API_KEY


class UnsupportedVersionError(ProtocolError, errors.UnsupportedVersionError):
    """A request names a version outside the API's supported range."""

    code = errors.ErrorCode.UNSUPPORTED_VERSION


class FrameTooLargeError(ProtocolError, errors.FrameTooLargeError):
    """A peer announced a frame longer than the connection's bound."""

    code = errors.ErrorCode.FRAME_TOO_LARGE


class LocalProtocolError(ValueError):
    """The caller asked to encode something the wire format cannot carry (a bug or bad input)."""
