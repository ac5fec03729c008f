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
    INVALID_REPLICA_ASSIGNMENT = 39
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
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INVALID_RECORD_STATE = 121
    TRANSACTIONAL_ID_NOT_FOUND = 105
    UNKNOWN_API_KEY = 1001
    FRAME_TOO_LARGE = 1002
    MALFORMED_REQUEST = 1003
    BROKER_SHUTTING_DOWN = 1004
    STORAGE_ERROR = 1005


class BrokerError(Exception):
    """An operating error reported to one client; the broker keeps serving the others.

    Each subclass below is one wire code (``code``); ``retriable`` says whether the same
    request may succeed later unchanged (the leader moved, the group is rebalancing...).
    """

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class UnknownServerError(BrokerError):
    """The broker failed in a way it has no better code for (see its log)."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(BrokerError):
    """The requested offset is outside the partition's log (below its start or past its end)."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptMessageError(BrokerError):
    """A record batch or stored record fails its CRC or framing checks."""

    code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(BrokerError):
    """The topic or partition does not exist (on this broker)."""

    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class LeaderNotAvailableError(BrokerError):
    """The partition has no leader right now (an election is under way)."""

    code = ErrorCode.LEADER_NOT_AVAILABLE
    retriable = True


class NotLeaderError(BrokerError):
    """This broker does not lead (or follow) the partition: refresh metadata and retry."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    retriable = True


class RequestTimedOutError(BrokerError):
    """The request's wait (replication, a forwarded call) ran out before it completed."""

    code = ErrorCode.REQUEST_TIMED_OUT
    retriable = True


class MessageTooLargeError(BrokerError):
    """A record batch is larger than the topic or broker allows."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class InvalidTopicError(BrokerError):
    """A topic name is invalid, or names an internal topic a client may not use."""

    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class NotEnoughReplicasError(BrokerError):
    """acks=all was refused: the ISR is smaller than min.insync.replicas."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS
    retriable = True


class NotEnoughReplicasAfterAppendError(BrokerError):
    """The batch was written but the ISR shrank below min.insync.replicas before it was replicated."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    retriable = True


class InvalidRequiredAcksError(BrokerError):
    """acks is not 0, 1 or -1 (all)."""

    code = ErrorCode.INVALID_REQUIRED_ACKS


class IllegalGenerationError(BrokerError):
    """A group member spoke for a generation that is not the group's current one."""

    code = ErrorCode.ILLEGAL_GENERATION


class InconsistentGroupProtocolError(BrokerError):
    """A member's protocol type or assignors do not match the group's."""

    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class InvalidGroupIdError(BrokerError):
    """The group id is empty or invalid."""

    code = ErrorCode.INVALID_GROUP_ID


class UnknownMemberIdError(BrokerError):
    """The group does not know this member id (it left or was evicted)."""

    code = ErrorCode.UNKNOWN_MEMBER_ID


class InvalidSessionTimeoutError(BrokerError):
    """The session timeout is outside the broker's allowed range."""

    code = ErrorCode.INVALID_SESSION_TIMEOUT


class RebalanceInProgressError(BrokerError):
    """The group is rebalancing: the member must rejoin."""

    code = ErrorCode.REBALANCE_IN_PROGRESS
    retriable = True


class TopicAuthorizationError(BrokerError):
    """The principal may not do this to the topic."""

    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationError(BrokerError):
    """The principal may not do this to the group."""

    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationError(BrokerError):
    """The principal may not do this to the cluster."""

    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class InvalidTimestampError(BrokerError):
    """A timestamp is neither a special value (-1, -2) nor a time in ms."""

    code = ErrorCode.INVALID_TIMESTAMP


class UnsupportedSaslMechanismError(BrokerError):
    """The client asked for a SASL mechanism this listener does not offer."""

    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM


class IllegalSaslStateError(BrokerError):
    """A SASL message arrived out of order (before the handshake, or after the exchange ended)."""

    code = ErrorCode.ILLEGAL_SASL_STATE


class UnsupportedVersionError(BrokerError):
    """The request's version is outside the range the API supports."""

    code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExistsError(BrokerError):
    """A topic with this name exists already."""

    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(BrokerError):
    """A partition count is invalid (not positive, too many, or fewer than now)."""

    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(BrokerError):
    """A replication factor is invalid (not positive, or more than the live brokers)."""

    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(BrokerError):
    """Replicas chosen by a client are invalid (an unknown broker, a repeated one, uneven or missing partitions)."""

    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfigError(BrokerError):
    """A configuration key or value is unknown or invalid."""

    code = ErrorCode.INVALID_CONFIG


class InvalidRequestError(BrokerError):
    """The request is well-formed but not valid (its message says what is wrong)."""

    code = ErrorCode.INVALID_REQUEST


class PolicyViolationError(BrokerError):
    """The request breaks a broker policy."""

    code = ErrorCode.POLICY_VIOLATION


class OutOfOrderSequenceError(BrokerError):
    """An idempotent producer's sequence number skips ahead: batches were lost in between."""

    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceError(BrokerError):
    """An idempotent producer resent a batch the log has already."""

    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(BrokerError):
    """The producer's epoch is older than the current one: a newer instance fenced it."""

    code = ErrorCode.INVALID_PRODUCER_EPOCH


class SaslAuthenticationError(BrokerError):
    """Authentication failed (wrong credentials, or none where they are required)."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class UnknownProducerIdError(BrokerError):
    """The log knows no state for this producer id (it expired or was deleted)."""

    code = ErrorCode.UNKNOWN_PRODUCER_ID


class NonEmptyGroupError(BrokerError):
    """The group still has members: it cannot be deleted."""

    code = ErrorCode.NON_EMPTY_GROUP


class GroupIdNotFoundError(BrokerError):
    """No group with this id exists."""

    code = ErrorCode.GROUP_ID_NOT_FOUND


class GroupSubscribedToTopicError(BrokerError):
    """A member of the group subscribes to the topic: its committed offsets cannot be deleted while it does."""

    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


class FencedLeaderEpochError(BrokerError):
    """The request's leader epoch is older than the partition's: refresh metadata and retry."""

    code = ErrorCode.FENCED_LEADER_EPOCH
    retriable = True


class FencedInstanceIdError(BrokerError):
    """A static member with this instance id was replaced by a newer one."""

    code = ErrorCode.FENCED_INSTANCE_ID


class GroupMaxSizeReachedError(BrokerError):
    """The group has as many members as it may."""

    code = ErrorCode.GROUP_MAX_SIZE_REACHED


class OffsetMetadataTooLargeError(BrokerError):
    """A committed offset's metadata string is too long."""

    code = ErrorCode.OFFSET_METADATA_TOO_LARGE


class CoordinatorNotAvailableError(BrokerError):
    """The group's coordinator is not available yet (its offsets partition has no leader)."""

    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    retriable = True


class NotCoordinatorError(BrokerError):
    """This broker does not coordinate the group: find its coordinator again."""

    code = ErrorCode.NOT_COORDINATOR
    retriable = True


class CoordinatorLoadInProgressError(BrokerError):
    """The coordinator is still loading the group's offsets: retry shortly."""

    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    retriable = True


class UnknownApiKeyError(BrokerError):
    """The request names an API this broker does not serve."""

    code = ErrorCode.UNKNOWN_API_KEY


class FrameTooLargeError(BrokerError):
    """A frame is larger than the connection's bound."""

    code = ErrorCode.FRAME_TOO_LARGE


class MalformedRequestError(BrokerError):
    """A request does not decode (truncated, trailing bytes, impossible values)."""

    code = ErrorCode.MALFORMED_REQUEST


class BrokerShuttingDownError(BrokerError):
    """The broker is stopping: retry on another broker."""

    code = ErrorCode.BROKER_SHUTTING_DOWN
    retriable = True


class StorageError(BrokerError):
    """The broker's storage failed (disk full, I/O error)."""

    code = ErrorCode.STORAGE_ERROR


class ResourceNotFoundError(BrokerError):
    """The named resource (a user, an ACL, a reassignment) does not exist."""

    code = ErrorCode.RESOURCE_NOT_FOUND


class DuplicateResourceError(BrokerError):
    """The resource to create exists already."""

    code = ErrorCode.DUPLICATE_RESOURCE


class InvalidRecordError(BrokerError):
    """A record was refused on produce: it does not decode, or lacks the key a compacted topic needs."""

    code = ErrorCode.INVALID_RECORD


class UnacceptableCredentialError(BrokerError):
    """A credential was refused (too few SCRAM iterations, a reserved user name...)."""

    code = ErrorCode.UNACCEPTABLE_CREDENTIAL


class NotControllerError(BrokerError):
    """The controller moved: the write was not applied; retry."""

    code = ErrorCode.NOT_CONTROLLER
    retriable = True


class InvalidRecordStateError(BrokerError):
    """A share-group acknowledgement names records this member does not hold leased (KIP-932's code):
    the lease expired, another member holds them, or they were acknowledged already."""

    code = ErrorCode.INVALID_RECORD_STATE
class InvalidTxnStateError(BrokerError):
    """The call does not fit the transaction's state (e.g. a commit with none ongoing, or a transactional batch
    for a partition the coordinator does not list)."""

    code = ErrorCode.INVALID_TXN_STATE


class InvalidProducerIdMappingError(BrokerError):
    """The producer id does not belong to the transactional id (another producer owns it now)."""

    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(BrokerError):
    """The transaction timeout asked for is above the broker's ``transaction_max_timeout_ms`` (or not positive)."""

    code = ErrorCode.INVALID_TRANSACTION_TIMEOUT


class ConcurrentTransactionsError(BrokerError):
    """The coordinator is still finishing the previous transaction of this id; retry shortly."""

    code = ErrorCode.CONCURRENT_TRANSACTIONS
    retriable = True


class TransactionCoordinatorFencedError(BrokerError):
    """A newer transaction coordinator (a higher coordinator epoch) owns the transaction."""

    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class TransactionalIdAuthorizationError(BrokerError):
    """The principal may not use (or see) this transactional id."""

    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class UnstableOffsetCommitError(BrokerError):
    """A transaction's offsets for these partitions are not decided yet; retry once it commits or aborts."""

    code = ErrorCode.UNSTABLE_OFFSET_COMMIT
    retriable = True


class ProducerFencedError(BrokerError):
    """A newer producer with the same transactional id exists (a higher epoch): this one must close."""

    code = ErrorCode.PRODUCER_FENCED


class TransactionalIdNotFoundError(BrokerError):
    """The coordinator knows no such transactional id."""

    code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


#: Every error class by its wire code (each code has exactly one class).
_BY_CODE: dict[ErrorCode, type[BrokerError]] = {cls.code: cls for cls in BrokerError.__subclasses__()}


def error_for_code(code: int, message: str) -> BrokerError:
    """Rebuild the typed exception for a wire ``code`` (used by clients decoding replies)."""
    try:
        cls = _BY_CODE[ErrorCode(code)]
    except ValueError:
        cls = UnknownServerError
        message = f"unknown error code {code}: {message}"
    return cls(message)
