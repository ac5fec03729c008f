"""Broker errors as Kafka error codes, and empty responses that carry one (pure).

``mqbroker.errors`` already numbers errors as Kafka does; only mqbroker's own codes (above 1000)
need a Kafka equivalent a client knows how to act on.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from mqbroker import errors
from mqbroker.errors import ErrorCode

#: Kafka codes mqbroker's own errors are reported with (Kafka has no code for them).
KAFKA_STORAGE_ERROR = 56
BROKER_NOT_AVAILABLE = 8
#: Kafka codes of the operations APIs (ElectLeaders, log directories, reassignments) with no mqbroker error class.
REPLICA_NOT_AVAILABLE = 9
LOG_DIR_NOT_FOUND = 57
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85
#: No topic has the id asked for (Metadata, DeleteTopics; Produce and Fetch from version 13).
UNKNOWN_TOPIC_ID = 100
_KAFKA_CODE_OF_OWN = {
    ErrorCode.UNKNOWN_API_KEY: ErrorCode.UNSUPPORTED_VERSION,
    ErrorCode.FRAME_TOO_LARGE: ErrorCode.MESSAGE_TOO_LARGE,
    ErrorCode.MALFORMED_REQUEST: ErrorCode.INVALID_REQUEST,
    ErrorCode.BROKER_SHUTTING_DOWN: BROKER_NOT_AVAILABLE,  # retriable: the client moves to another broker
    ErrorCode.STORAGE_ERROR: KAFKA_STORAGE_ERROR,
}
_UNEXPECTED = "internal error; see the broker log"


def kafka_error(error: BaseException | None) -> tuple[int, str | None]:
    """The Kafka error code and message of ``error`` (0 and None for no error)."""
    if error is None:
        return 0, None
    if not isinstance(error, errors.BrokerError):
        return int(ErrorCode.UNKNOWN_SERVER_ERROR), _UNEXPECTED
    return int(_KAFKA_CODE_OF_OWN.get(error.code, error.code)), error.message


def _empty_value(annotation: Any) -> Any:
    """The emptiest value of a required field: 0, "", b"", (), False, or an empty struct."""
    inner = typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation
    if typing.get_origin(inner) in (typing.Union, types.UnionType):
        inner = next(arg for arg in typing.get_args(inner) if arg is not type(None))
        return _empty_value(inner)
    if typing.get_origin(inner) is tuple:
        return ()
    if dataclasses.is_dataclass(inner):
        return empty_message(inner)
    return {str: "", bytes: b"", bool: False, int: 0, float: 0.0}.get(inner, b"")


def empty_message(cls: type, **values: Any) -> Any:
    """An instance of ``cls`` with ``values`` and every other required field empty."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for field in dataclasses.fields(cls):
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if required and field.name not in values:
            values[field.name] = _empty_value(hints[field.name])
    return cls(**values)


def error_response(response_type: type, error: BaseException) -> Any | None:
    """A response of ``response_type`` failing as a whole with ``error``, or None when the type has no
    top-level error code (its errors live per topic or partition, which the handler fills in)."""
    names = {field.name for field in dataclasses.fields(response_type)}
    if "error_code" not in names:
        return None
    code, message = kafka_error(error)
    values: dict[str, Any] = {"error_code": code}
    if "error_message" in names:
        values["error_message"] = message
    return empty_message(response_type, **values)
