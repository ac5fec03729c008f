"""The requests a transactional producer sends, and how it reads their answers (pure; both drivers use them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mqbroker import errors
from mqbroker.client.group_member import COORDINATOR_MOVED, ConsumerGroupMetadata
from mqbroker.client.transaction_state import TopicPartition
from mqbroker.protocols.native import txn_messages as t
from mqbroker.protocols.native.messages import InitProducerIdRequest, InitProducerIdResponse

#: Retried after a new look-up of the coordinator (it moved, is not ready, or did not answer in time).
FIND_AGAIN = COORDINATOR_MOVED | {errors.ErrorCode.REQUEST_TIMED_OUT}
#: Retried on the same coordinator: it is still writing the previous transaction's markers.
WAIT = frozenset({errors.ErrorCode.CONCURRENT_TRANSACTIONS})


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, tuple[int, ...]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        grouped.setdefault(topic, []).append(partition)
    return {topic: tuple(numbers) for topic, numbers in grouped.items()}


def raise_first_partition_error(response: object) -> None:
    """Raise the typed error of the first refused partition of an AddPartitionsToTxn or TxnOffsetCommit answer."""
    topics = response.results if isinstance(response, t.AddPartitionsToTxnResponse) else response.topics  # type: ignore[attr-defined]
    for topic in topics:
        for result in topic.partitions:
            if result.error_code:
                raise errors.error_for_code(result.error_code, result.error_message
                                            or f"{topic.name}-{result.partition_index} was refused")


@dataclass(slots=True)
class TransactionRequests:
    """Builds one transactional producer's requests (its id, and the producer id and epoch once known).

    ``transaction_version`` 2 (KIP-890 part 2, used when the coordinator speaks EndTxn version 1): the
    partition leaders add partitions as their first batches arrive, and every EndTxn moves the
    producer to its next epoch (``ended``).
    """

    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int = -1
    producer_epoch: int = -1
    transaction_version: int = 1

    def init_producer_id(self) -> InitProducerIdRequest:
        """Fence earlier incarnations of the id."""
        return InitProducerIdRequest(transactional_id=self.transactional_id,
                                     transaction_timeout_ms=self.transaction_timeout_ms)

    def initialized(self, response: object) -> None:
        """Take the producer id and epoch InitProducerId answered."""
        assert isinstance(response, InitProducerIdResponse)
        self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch

    def add_partitions(self, partitions: Iterable[TopicPartition]) -> t.AddPartitionsToTxnRequest:
        """List ``partitions`` in the ongoing transaction."""
        return t.AddPartitionsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            topics=tuple(t.AddPartitionsToTxnTopic(name=name, partitions=numbers)
                         for name, numbers in _by_topic(partitions).items()))

    def add_offsets(self, group_id: str) -> t.AddOffsetsToTxnRequest:
        """Include the group's offsets partition in the transaction."""
        return t.AddOffsetsToTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                                        producer_epoch=self.producer_epoch, group_id=group_id)

    def commit_offsets(self, offsets: Mapping[TopicPartition, int], group: ConsumerGroupMetadata
                       ) -> t.TxnOffsetCommitRequest:
        """Commit ``offsets`` for the group inside the transaction (sent to the group's coordinator)."""
        return t.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id, group_id=group.group_id, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, generation_id=group.generation_id, member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            topics=tuple(t.TxnOffsetCommitRequestTopic(name=name, partitions=tuple(
                t.TxnOffsetCommitRequestPartition(partition_index=number, committed_offset=offsets[name, number])
                for number in numbers)) for name, numbers in _by_topic(offsets).items()))

    def end(self, committed: bool) -> t.EndTxnRequest:
        """Commit or abort (version 2: and move to the next epoch)."""
        return t.EndTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                               producer_epoch=self.producer_epoch, committed=committed,
                               bump_epoch=self.transaction_version >= 2)

    def ended(self, response: object) -> bool:
        """Take the producer id and epoch an epoch-bumping EndTxn answered; True when they changed."""
        assert isinstance(response, t.EndTxnResponse)
        if self.transaction_version < 2 or response.producer_id < 0:
            return False
        self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
        return True
