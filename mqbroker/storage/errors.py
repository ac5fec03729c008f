"""Typed errors raised by the storage library; the broker maps them to wire codes."""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every error the storage library raises on purpose."""


class CorruptFileError(StorageError):
    """A storage file (checkpoint, leader-epoch cache, producer snapshot, Raft state) with a bad CRC or layout."""


class OffsetOutOfRangeError(StorageError):
    """An offset below the log start or above the log end offset."""


class RecordTooLargeError(StorageError):
    """A batch larger than the partition's ``max.message.bytes``."""


class LogClosedError(StorageError):
    """An operation on a partition log that was closed or deleted."""


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch does not continue its last sequence (a gap or a reorder)."""


class DuplicateSequenceError(StorageError):
    """A batch repeats a written sequence but cannot be answered with its original offsets."""


class InvalidProducerEpochError(StorageError):
    """A batch from an older epoch of a producer id: a newer incarnation has fenced it."""


class InvalidConfigError(StorageError):
    """A log setting with an unknown key or a value out of range; the message names the key."""


class UnknownPartitionError(StorageError):
    """A partition the log manager does not hold (never created, or deleted)."""


class PartitionExistsError(StorageError):
    """A partition created twice."""


class InvalidTxnStateError(StorageError):
    """A batch that does not fit the producer's transaction here: a transactional batch the coordinator
    has not verified, or a non-transactional batch while its transaction is open (Kafka's INVALID_TXN_STATE)."""


class InvalidRecordError(StorageError):
    """A batch a client may not write: a control batch, or a transactional batch without a producer id."""


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker from an older coordinator epoch than the partition has seen for that producer."""
