# -*- test-case-name: tests.unit.forwarding.test_transaction_peers -*-
"""The transaction calls one broker makes on another over the native protocol (``core.txn_markers.TransactionPeers``).

A partition leader asks a transactional id's coordinator whether a partition belongs to the
producer's ongoing transaction (AddPartitionsToTxn with ``verify_only``, KIP-890); a coordinator
has the partition leaders append its markers (WriteTxnMarkers). Both travel on the pooled
inter-broker connections the routing broker uses (``PeerConnections``), as the broker's principal.
"""

from __future__ import annotations

from collections.abc import Sequence

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from mqbroker import errors
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.forwarding.routing_broker import PeerRequests
from mqbroker.groups.model import TopicPartition
from mqbroker.protocols.native import txn_messages as t
from mqbroker.transactions.messages import AddPartitionsRequest, MarkerOutcome, TransactionMarker

#: How long a verification or a round of markers waits for the other broker.
TRANSACTION_PEER_WAIT_S = 5.0


def _by_topic(partitions: frozenset[TopicPartition]) -> dict[str, tuple[int, ...]]:
    grouped: dict[str, list[int]] = {}
    for topic_partition in sorted(partitions):
        grouped.setdefault(topic_partition.topic, []).append(topic_partition.partition)
    return {name: tuple(numbers) for name, numbers in grouped.items()}


def verify_request(request: AddPartitionsRequest) -> t.AddPartitionsToTxnRequest:
    """The native form of a leader's verification (``verify_only``), or of its addition (transaction version 2)."""
    return t.AddPartitionsToTxnRequest(
        transactional_id=request.transactional_id, producer_id=request.producer_id,
        producer_epoch=request.producer_epoch, verify_only=request.verify_only,
        topics=tuple(t.AddPartitionsToTxnTopic(name=name, partitions=numbers)
                     for name, numbers in _by_topic(request.partitions).items()))


def verify_result(response: t.AddPartitionsToTxnResponse) -> None:
    """Raise the coordinator's typed error if any partition is not in the transaction."""
    for topic in response.results:
        for result in topic.partitions:
            if result.error_code:
                raise errors.error_for_code(result.error_code, result.error_message
                                            or f"{topic.name}-{result.partition_index} is not in the transaction")


def markers_request(markers: Sequence[TransactionMarker]) -> t.WriteTxnMarkersRequest:
    """The native form of a coordinator's markers."""
    return t.WriteTxnMarkersRequest(markers=tuple(
        t.WritableTxnMarker(producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                            transaction_result=marker.committed, coordinator_epoch=marker.coordinator_epoch,
                            topics=tuple(t.WritableTxnMarkerTopic(name=name, partition_indexes=numbers)
                                         for name, numbers in _by_topic(marker.partitions).items()))
        for marker in markers))


def markers_result(response: t.WriteTxnMarkersResponse) -> list[MarkerOutcome]:
    """One outcome per marker and partition, as the leader answered."""
    return [
        MarkerOutcome(producer_id=marker.producer_id, topic_partition=TopicPartition(topic.name, result.partition_index),
                      error=errors.error_for_code(result.error_code, result.error_message or "marker refused")
                      if result.error_code else None)
        for marker in response.markers for topic in marker.topics for result in topic.partitions
    ]


def _unreachable_coordinator(failure: Failure, node_id: int) -> None:
    """A coordinator that cannot be asked: the producer retries (and looks the coordinator up again)."""
    failure.trap(BrokerUnavailableError, errors.RequestTimedOutError)
    raise errors.CoordinatorNotAvailableError(
        f"the transaction coordinator (broker {node_id}) could not verify the partition: {failure.getErrorMessage()}; "
        "retry")


class NativeTransactionPeers:
    """``TransactionPeers`` over the inter-broker native connections."""

    def __init__(self, peers: PeerRequests) -> None:
        self._peers = peers

    def verify(self, node_id: int, request: AddPartitionsRequest) -> Deferred[None]:
        """Ask broker ``node_id``, the transaction's coordinator, whether the partitions are in it (KIP-890), or
        to add them (``request.verify_only`` false)."""
        sent = self._peers.request(node_id, verify_request(request), TRANSACTION_PEER_WAIT_S)
        sent.addErrback(_unreachable_coordinator, node_id)
        return sent.addCallback(verify_result)

    def write_markers(self, node_id: int, markers: Sequence[TransactionMarker]) -> Deferred[list[MarkerOutcome]]:
        """Have broker ``node_id`` append markers to the partitions it leads."""
        sent = self._peers.request(node_id, markers_request(markers), TRANSACTION_PEER_WAIT_S)
        return sent.addCallback(markers_result)
