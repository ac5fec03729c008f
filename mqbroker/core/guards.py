"""The entry of every broker call: the permission check, and raised errors returned as failed Deferreds."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from twisted.internet.defer import Deferred, fail

from mqbroker import errors
from mqbroker.interfaces import IAuthorizer
from mqbroker.model import Operation, Principal, ResourceType
from mqbroker.records.errors import CorruptRecordError
from mqbroker.storage import errors as storage_errors

_STORAGE_TO_BROKER_ERROR: dict[type[Exception], Callable[[str], errors.BrokerError]] = {
    CorruptRecordError: errors.CorruptMessageError,
    storage_errors.OffsetOutOfRangeError: errors.OffsetOutOfRangeError,
    storage_errors.RecordTooLargeError: errors.MessageTooLargeError,
    storage_errors.LogClosedError: errors.UnknownTopicOrPartitionError,
    storage_errors.InvalidConfigError: errors.InvalidConfigError,
    storage_errors.OutOfOrderSequenceError: errors.OutOfOrderSequenceError,
    storage_errors.DuplicateSequenceError: errors.DuplicateSequenceError,
    storage_errors.InvalidProducerEpochError: errors.InvalidProducerEpochError,
    storage_errors.UnknownPartitionError: errors.UnknownTopicOrPartitionError,
    storage_errors.InvalidTxnStateError: errors.InvalidTxnStateError,
    storage_errors.InvalidRecordError: errors.InvalidRecordError,
    storage_errors.TransactionCoordinatorFencedError: errors.TransactionCoordinatorFencedError,
}

_DENIED: dict[ResourceType, Callable[[str], errors.BrokerError]] = {
    ResourceType.TOPIC: errors.TopicAuthorizationError,
    ResourceType.GROUP: errors.GroupAuthorizationError,
    ResourceType.CLUSTER: errors.ClusterAuthorizationError,
    ResourceType.TRANSACTIONAL_ID: errors.TransactionalIdAuthorizationError,
}

Parameters = ParamSpec("Parameters")
Result = TypeVar("Result")


def broker_error(error: Exception) -> errors.BrokerError:
    """Translate a storage error into the broker error reported to clients; anything else is re-raised."""
    if isinstance(error, errors.BrokerError):
        return error
    for storage_type, broker_type in _STORAGE_TO_BROKER_ERROR.items():
        if isinstance(error, storage_type):
            return broker_type(str(error))
    raise error


def errors_as_failures(
    call: Callable[Parameters, Deferred[Result]],
) -> Callable[Parameters, Deferred[Result]]:
    """Make a Deferred-returning call report the broker or storage error it raises as a failed Deferred.

    The error is the typed ``BrokerError`` a client sees (``broker_error``); any other exception
    is a bug and propagates.
    """

    @functools.wraps(call)
    def guarded(*args: Parameters.args, **kwargs: Parameters.kwargs) -> Deferred[Result]:
        try:
            return call(*args, **kwargs)
        except Exception as error:
            return fail(broker_error(error))

    return guarded


def require_permission(
    authorizer: IAuthorizer, principal: Principal, operation: Operation, resource_type: ResourceType, name: str
) -> None:
    """Raise the resource's authorization error unless ``principal`` may do ``operation`` on it."""
    if not authorizer.authorize(principal, operation, resource_type, name):
        raise _DENIED[resource_type](f"{principal} may not {operation.value} {resource_type.value} {name!r}")
