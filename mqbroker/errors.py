"""Error codes and the exception tree shared by the broker core and every front end.

Each exception class carries the wire code it is reported with (the h2 style), so a
front end turns any ``BrokerError`` into its own protocol's error reply without a
lookup table of its own. Codes follow Kafka's numbering where a Kafka error exists,
so that operators and tools recognise them; codes above 1000 are mqbroker's own.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Wire error codes of the native protocol (documented in docs/protocol.md)."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    INVALID_CONFIG = 40
    POLICY_VIOLATION = 44
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    GROUP_ID_NOT_FOUND = 69
    FENCED_LEADER_EPOCH = 74
    NON_EMPTY_GROUP = 68
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    TRANSACTIONAL_ID_NOT_FOUND = 105
    UNKNOWN_API_KEY = 1001
    FRAME_TOO_LARGE = 1002
    MALFORMED_REQUEST = 1003
    BROKER_SHUTTING_DOWN = 1004
    STORAGE_ERROR = 1005


class BrokerError(Exception):
    """An operating error reported to one client; the broker keeps serving the others."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


def _error_class(name: str, code: ErrorCode, retriable: bool = False) -> type[BrokerError]:
    """Build one ``BrokerError`` subclass bound to ``code`` (the table below is the whole tree)."""
    return type(name, (BrokerError,), {"code": code, "retriable": retriable, "__doc__": f"Reported as {code.name}."})


UnknownServerError = _error_class("UnknownServerError", ErrorCode.UNKNOWN_SERVER_ERROR)
OffsetOutOfRangeError = _error_class("OffsetOutOfRangeError", ErrorCode.OFFSET_OUT_OF_RANGE)
CorruptMessageError = _error_class("CorruptMessageError", ErrorCode.CORRUPT_MESSAGE)
UnknownTopicOrPartitionError = _error_class(
    "UnknownTopicOrPartitionError", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
)
LeaderNotAvailableError = _error_class("LeaderNotAvailableError", ErrorCode.LEADER_NOT_AVAILABLE, True)
NotLeaderError = _error_class("NotLeaderError", ErrorCode.NOT_LEADER_OR_FOLLOWER, True)
RequestTimedOutError = _error_class("RequestTimedOutError", ErrorCode.REQUEST_TIMED_OUT, True)
MessageTooLargeError = _error_class("MessageTooLargeError", ErrorCode.MESSAGE_TOO_LARGE)
InvalidTopicError = _error_class("InvalidTopicError", ErrorCode.INVALID_TOPIC_EXCEPTION)
NotEnoughReplicasError = _error_class("NotEnoughReplicasError", ErrorCode.NOT_ENOUGH_REPLICAS, True)
NotEnoughReplicasAfterAppendError = _error_class(
    "NotEnoughReplicasAfterAppendError", ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, True
)
InvalidRequiredAcksError = _error_class("InvalidRequiredAcksError", ErrorCode.INVALID_REQUIRED_ACKS)
IllegalGenerationError = _error_class("IllegalGenerationError", ErrorCode.ILLEGAL_GENERATION)
InconsistentGroupProtocolError = _error_class(
    "InconsistentGroupProtocolError", ErrorCode.INCONSISTENT_GROUP_PROTOCOL
)
InvalidGroupIdError = _error_class("InvalidGroupIdError", ErrorCode.INVALID_GROUP_ID)
UnknownMemberIdError = _error_class("UnknownMemberIdError", ErrorCode.UNKNOWN_MEMBER_ID)
InvalidSessionTimeoutError = _error_class("InvalidSessionTimeoutError", ErrorCode.INVALID_SESSION_TIMEOUT)
RebalanceInProgressError = _error_class("RebalanceInProgressError", ErrorCode.REBALANCE_IN_PROGRESS, True)
TopicAuthorizationError = _error_class("TopicAuthorizationError", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GroupAuthorizationError = _error_class("GroupAuthorizationError", ErrorCode.GROUP_AUTHORIZATION_FAILED)
ClusterAuthorizationError = _error_class("ClusterAuthorizationError", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
InvalidTimestampError = _error_class("InvalidTimestampError", ErrorCode.INVALID_TIMESTAMP)
UnsupportedSaslMechanismError = _error_class(
    "UnsupportedSaslMechanismError", ErrorCode.UNSUPPORTED_SASL_MECHANISM
)
IllegalSaslStateError = _error_class("IllegalSaslStateError", ErrorCode.ILLEGAL_SASL_STATE)
UnsupportedVersionError = _error_class("UnsupportedVersionError", ErrorCode.UNSUPPORTED_VERSION)
TopicAlreadyExistsError = _error_class("TopicAlreadyExistsError", ErrorCode.TOPIC_ALREADY_EXISTS)
InvalidPartitionsError = _error_class("InvalidPartitionsError", ErrorCode.INVALID_PARTITIONS)
InvalidReplicationFactorError = _error_class(
    "InvalidReplicationFactorError", ErrorCode.INVALID_REPLICATION_FACTOR
)
InvalidConfigError = _error_class("InvalidConfigError", ErrorCode.INVALID_CONFIG)
InvalidRequestError = _error_class("InvalidRequestError", ErrorCode.INVALID_REQUEST)
PolicyViolationError = _error_class("PolicyViolationError", ErrorCode.POLICY_VIOLATION)
OutOfOrderSequenceError = _error_class("OutOfOrderSequenceError", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
DuplicateSequenceError = _error_class("DuplicateSequenceError", ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
InvalidProducerEpochError = _error_class("InvalidProducerEpochError", ErrorCode.INVALID_PRODUCER_EPOCH)
SaslAuthenticationError = _error_class("SaslAuthenticationError", ErrorCode.SASL_AUTHENTICATION_FAILED)
UnknownProducerIdError = _error_class("UnknownProducerIdError", ErrorCode.UNKNOWN_PRODUCER_ID)
NonEmptyGroupError = _error_class("NonEmptyGroupError", ErrorCode.NON_EMPTY_GROUP)
GroupIdNotFoundError = _error_class("GroupIdNotFoundError", ErrorCode.GROUP_ID_NOT_FOUND)
FencedLeaderEpochError = _error_class("FencedLeaderEpochError", ErrorCode.FENCED_LEADER_EPOCH, True)
FencedInstanceIdError = _error_class("FencedInstanceIdError", ErrorCode.FENCED_INSTANCE_ID)
GroupMaxSizeReachedError = _error_class("GroupMaxSizeReachedError", ErrorCode.GROUP_MAX_SIZE_REACHED)
OffsetMetadataTooLargeError = _error_class("OffsetMetadataTooLargeError", ErrorCode.OFFSET_METADATA_TOO_LARGE)
CoordinatorNotAvailableError = _error_class(
    "CoordinatorNotAvailableError", ErrorCode.COORDINATOR_NOT_AVAILABLE, True
)
NotCoordinatorError = _error_class("NotCoordinatorError", ErrorCode.NOT_COORDINATOR, True)
CoordinatorLoadInProgressError = _error_class(
    "CoordinatorLoadInProgressError", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, True
)
UnknownApiKeyError = _error_class("UnknownApiKeyError", ErrorCode.UNKNOWN_API_KEY)
FrameTooLargeError = _error_class("FrameTooLargeError", ErrorCode.FRAME_TOO_LARGE)
MalformedRequestError = _error_class("MalformedRequestError", ErrorCode.MALFORMED_REQUEST)
BrokerShuttingDownError = _error_class("BrokerShuttingDownError", ErrorCode.BROKER_SHUTTING_DOWN, True)
StorageError = _error_class("StorageError", ErrorCode.STORAGE_ERROR)
ResourceNotFoundError = _error_class("ResourceNotFoundError", ErrorCode.RESOURCE_NOT_FOUND)
DuplicateResourceError = _error_class("DuplicateResourceError", ErrorCode.DUPLICATE_RESOURCE)
UnacceptableCredentialError = _error_class("UnacceptableCredentialError", ErrorCode.UNACCEPTABLE_CREDENTIAL)
NotControllerError = _error_class("NotControllerError", ErrorCode.NOT_CONTROLLER, True)
InvalidTxnStateError = _error_class("InvalidTxnStateError", ErrorCode.INVALID_TXN_STATE)
InvalidProducerIdMappingError = _error_class("InvalidProducerIdMappingError", ErrorCode.INVALID_PRODUCER_ID_MAPPING)
InvalidTransactionTimeoutError = _error_class("InvalidTransactionTimeoutError", ErrorCode.INVALID_TRANSACTION_TIMEOUT)
ConcurrentTransactionsError = _error_class("ConcurrentTransactionsError", ErrorCode.CONCURRENT_TRANSACTIONS, True)
TransactionCoordinatorFencedError = _error_class(
    "TransactionCoordinatorFencedError", ErrorCode.TRANSACTION_COORDINATOR_FENCED
)
TransactionalIdAuthorizationError = _error_class(
    "TransactionalIdAuthorizationError", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
)
InvalidRecordError = _error_class("InvalidRecordError", ErrorCode.INVALID_RECORD)
UnstableOffsetCommitError = _error_class("UnstableOffsetCommitError", ErrorCode.UNSTABLE_OFFSET_COMMIT, True)
ProducerFencedError = _error_class("ProducerFencedError", ErrorCode.PRODUCER_FENCED)
TransactionalIdNotFoundError = _error_class("TransactionalIdNotFoundError", ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)

_BY_CODE: dict[ErrorCode, type[BrokerError]] = {
    cls.code: cls for cls in list(globals().values()) if isinstance(cls, type) and issubclass(cls, BrokerError)
    and cls is not BrokerError
}


def error_for_code(code: int, message: str) -> BrokerError:
    """Rebuild the typed exception for a wire ``code`` (used by clients decoding replies)."""
    try:
        cls = _BY_CODE[ErrorCode(code)]
    except ValueError:
        cls = UnknownServerError
        message = f"unknown error code {code}: {message}"
    return cls(message)
