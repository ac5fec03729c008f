"""Every call the Kafka front end makes on ``IBroker``, in one thin module.

Handlers pass plain values (Kafka's numbers and names) and get the broker's typed values back
(``ProduceResult``, ``FetchResult``, the group responses); building the broker's request objects
(``Acks``, ``FetchRequest``, the group requests) happens here only. The one pure helper taken from
the core (the topic configuration keys and their layers) is imported here for the same reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed

from mqbroker import errors
from mqbroker.core.topic_config import TopicConfigLayers, built_in_topic_configs
from mqbroker.groups import messages as group_messages
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import CommittedOffset
from mqbroker.interfaces import IBroker
from mqbroker.model import (
    Acks,
    BrokerEndpoint,
    ClusterMetadata,
    FetchPosition,
    FetchRequest,
    FetchResult,
    IsolationLevel,
    OffsetAndTimestamp,
    PartitionReassignment,
    Principal,
    ProduceResult,
    ProducerIdentity,
    TopicSpec,
)
from mqbroker.protocols.schema import ZERO_UUID
from mqbroker.transactions import messages as txn_messages


class BrokerCalls:
    """The broker API as the Kafka handlers use it, for one connection's principal."""

    def __init__(self, broker: IBroker, principal: Principal, client_id: str) -> None:
        self._broker = broker
        self.principal = principal
        self.client_id = client_id
        #: Topic names by id, learnt from Metadata for the requests that name topics by id (``topic_names``).
        self._topic_names: dict[bytes, str] = {}

    # -- records -------------------------------------------------------------------------------

    def produce(self, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int,
                transactional_id: str | None = None, add_to_transaction: bool = False) -> Deferred[ProduceResult]:
        """Append batches (acks: 0, 1 or -1 as on the Kafka wire; others fail with INVALID_REQUIRED_ACKS);
        ``add_to_transaction``: a transactional batch adds its partition to the transaction (version 2)."""
        try:
            required = Acks.from_wire(acks)
        except errors.BrokerError as error:
            return fail(error)
        return self._broker.produce(self.principal, topic, partition, records, required, timeout_ms, transactional_id,
                                    add_to_transaction=add_to_transaction)

    def fetch(self, positions: Iterable[tuple[str, int, int, int, int]], max_wait_ms: int, min_bytes: int,
              max_bytes: int, isolation_level: int = 0) -> Deferred[list[FetchResult]]:
        """Long-poll read of (topic, partition, offset, max bytes, current leader epoch) positions."""
        wanted = tuple(FetchPosition(topic=topic, partition=partition, offset=offset, max_bytes=partition_max_bytes,
                                     current_leader_epoch=leader_epoch)
                       for topic, partition, offset, partition_max_bytes, leader_epoch in positions)
        request = FetchRequest(positions=wanted, wait_ms_max=max_wait_ms, response_bytes_min=min_bytes,
                               response_bytes_max=max_bytes,
                               isolation_level=IsolationLevel.READ_COMMITTED if isolation_level == 1
                               else IsolationLevel.READ_UNCOMMITTED)
        return self._broker.fetch(self.principal, request)

    def list_offset(self, topic: str, partition: int, timestamp_ms: int,
                    isolation_level: int = 0) -> Deferred[OffsetAndTimestamp]:
        """Fires with an ``OffsetAndTimestamp`` (-1 latest, -2 earliest, else the first at or after the time)."""
        return self._broker.list_offset(self.principal, topic, partition, timestamp_ms, isolation_level)

    def init_producer_id(self, transactional_id: str | None = None,
                         transaction_timeout_ms: int = -1) -> Deferred[ProducerIdentity]:
        """A fresh idempotent producer identity, or a transactional id's with a new epoch (``ProducerIdentity``)."""
        return self._broker.init_producer_id(self.principal, transactional_id, transaction_timeout_ms)

    # -- transactions ----------------------------------------------------------------------------

    def find_transaction_coordinator(self, transactional_id: str) -> Deferred[BrokerEndpoint]:
        """The ``BrokerEndpoint`` coordinating ``transactional_id``."""
        return self._broker.find_transaction_coordinator(self.principal, transactional_id)

    def add_partitions_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: Iterable[tuple[str, int]]) -> Deferred[None]:
        """Add (topic, partition)s to the producer's ongoing transaction."""
        return self._broker.add_partitions_to_txn(self.principal, txn_messages.AddPartitionsRequest(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            partitions=frozenset(TopicPartition(topic, partition) for topic, partition in partitions)))

    def add_offsets_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           group_id: str) -> Deferred[None]:
        """Add the group's offsets partition to the producer's ongoing transaction."""
        return self._broker.add_offsets_to_txn(self.principal, txn_messages.AddOffsetsRequest(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            group_id=group_id))

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool,
                bump_epoch: bool = False) -> Deferred[txn_messages.ProducerIdAndEpoch | None]:
        """Commit or abort the producer's ongoing transaction; ``bump_epoch`` (transaction version 2): fires with
        the producer's next id and epoch."""
        return self._broker.end_txn(self.principal, txn_messages.EndTxnRequest(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            committed=committed, bump_epoch=bump_epoch))

    def txn_commit_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                           member_id: str, group_instance_id: str | None, generation_id: int,
                           offsets: Iterable[tuple[str, int, int, str, int]],
                           add_to_transaction: bool = False) -> Deferred[None]:
        """Commit (topic, partition, offset, metadata, leader epoch or -1) positions inside the transaction
        (``add_to_transaction``: its offsets partition joins the transaction first, transaction version 2)."""
        return self._broker.txn_commit_offsets(self.principal, txn_messages.TxnOffsetCommitRequest(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            offsets=_offset_commit(group_id, member_id, group_instance_id, generation_id, offsets),
            add_to_transaction=add_to_transaction))

    def describe_transactions(self, transactional_ids: Sequence[str]) -> Deferred[list[object]]:
        """A ``TransactionDescription`` or the typed error per transactional id."""
        return self._broker.describe_transactions(self.principal, transactional_ids)

    def write_txn_markers(self, markers: Sequence[txn_messages.TransactionMarker]
                          ) -> Deferred[list[txn_messages.MarkerOutcome]]:
        """Append a coordinator's markers to the partitions led here; one outcome per partition."""
        return self._broker.write_txn_markers(self.principal, markers)

    # -- cluster and topics ----------------------------------------------------------------------

    def list_transactions(self, states: Sequence[txn_messages.TransactionState], producer_ids: Sequence[int]
                          ) -> Deferred[list[txn_messages.TransactionListing]]:
        """The transactions coordinated here, in the given states and of the given producers (empty: any)."""
        return self._broker.list_transactions(self.principal, states, producer_ids)

    def metadata(self, topics: Sequence[str] | None, allow_auto_create: bool) -> Deferred[ClusterMetadata]:
        """The cluster and ``topics`` (None: all) as ``ClusterMetadata``."""
        return self._broker.metadata(self.principal, topics, allow_auto_create)

    def topic_names(self, topic_ids: Iterable[bytes]) -> Deferred[dict[bytes, str]]:
        """The names of the topics with these ids (KIP-516) that the principal may describe; unknown ids are absent.

        Names learnt stay with the connection and are checked against the named topics' current ids on every
        call (a topic deleted and created again has a new id); an id not known yet costs one look at every topic.
        """
        wanted = set(topic_ids)
        known = {self._topic_names[topic_id] for topic_id in wanted if topic_id in self._topic_names}
        if not wanted:
            return succeed({})
        if len(known) < len(wanted):
            return self._learn_topic_names(wanted)
        return self.metadata(sorted(known), False).addCallback(self._checked_topic_names, wanted)

    def _checked_topic_names(self, described: ClusterMetadata, wanted: set[bytes]) -> Any:
        current = {topic.topic_id: topic.name for topic in described.topics if topic.error is None}
        if wanted <= current.keys():
            return {topic_id: current[topic_id] for topic_id in wanted}
        return self._learn_topic_names(wanted)

    def _learn_topic_names(self, wanted: set[bytes]) -> Deferred[dict[bytes, str]]:
        def learnt(described: ClusterMetadata) -> dict[bytes, str]:
            self._topic_names = {topic.topic_id: topic.name for topic in described.topics
                                 if topic.error is None and topic.topic_id != ZERO_UUID}
            return {topic_id: self._topic_names[topic_id] for topic_id in wanted if topic_id in self._topic_names}
        return self.metadata(None, False).addCallback(learnt)

    def create_topic(self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str],
                     validate_only: bool) -> Deferred[None]:
        """Create a topic (-1: the broker's default partitions or replication factor)."""
        spec = TopicSpec(name=name, partitions=partitions, replication_factor=replication_factor, configs=dict(configs))
        return self._broker.create_topic(self.principal, spec, validate_only)

    def delete_topic(self, name: str) -> Deferred[None]:
        """Delete a topic and its data."""
        return self._broker.delete_topic(self.principal, name)

    def create_partitions(self, topic: str, total_count: int) -> Deferred[None]:
        """Grow ``topic`` to ``total_count`` partitions."""
        return self._broker.create_partitions(self.principal, topic, total_count)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> Deferred[int]:
        """Delete records below ``before_offset``; fires with the new log start offset."""
        return self._broker.delete_records(self.principal, topic, partition, before_offset)

    def describe_configs(self, topic: str) -> Deferred[dict[str, str]]:
        """A topic's effective configuration."""
        return self._broker.describe_configs(self.principal, topic)

    def alter_configs(self, topic: str, set_configs: Mapping[str, str], delete_configs: Sequence[str]) -> Deferred[None]:
        """Set some keys of a topic's configuration and reset others to their defaults."""
        return self._broker.alter_configs(self.principal, topic, dict(set_configs), list(delete_configs))

    def describe_config_layers(self, topic: str | None) -> Deferred[TopicConfigLayers]:
        """A topic's configuration layer by layer (None: this broker's topic defaults)."""
        return self._broker.describe_config_layers(self.principal, topic)

    def alter_broker_configs(self, broker_id: int | None, set_configs: Mapping[str, str], delete_configs: Sequence[str],
                             validate_only: bool) -> Deferred[None]:
        """Set and reset dynamic topic defaults (topic keys) of the cluster (None) or of one broker."""
        return self._broker.alter_broker_configs(self.principal, broker_id, dict(set_configs), list(delete_configs),
                                                 validate_only)

    def replica_sizes(self, topic: str) -> Deferred[dict[int, int]]:
        """Bytes on disk of ``topic``'s replicas on this broker, by partition."""
        return self._broker.replica_sizes(self.principal, topic)

    def reassign_partition(self, topic: str, partition: int, target_replicas: Sequence[int]) -> Deferred[None]:
        """Start moving a partition's replicas to ``target_replicas`` (the first is the preferred leader)."""
        return self._broker.reassign_partition(self.principal, topic, partition, list(target_replicas))

    def list_reassignments(self, topics: Sequence[str] | None) -> Deferred[list[PartitionReassignment]]:
        """The reassignments in progress (of ``topics``; None: every topic)."""
        return self._broker.list_reassignments(self.principal, topics)

    def describe_quorum(self) -> Deferred[dict[str, Any]]:
        """The controller quorum: voters, leader, term, commit index and brokers."""
        return self._broker.describe_quorum(self.principal)

    # -- groups ----------------------------------------------------------------------------------

    def find_coordinator(self, group_id: str) -> Deferred[BrokerEndpoint]:
        """The ``BrokerEndpoint`` coordinating ``group_id``."""
        return self._broker.find_coordinator(self.principal, group_id)

    def join_group(self, *, group_id: str, member_id: str, group_instance_id: str | None, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str, topics: Iterable[str],
                   assignors: Sequence[str]) -> Deferred[group_messages.JoinResponse]:
        """Join; fires with a ``JoinResponse`` (member id, generation, chosen assignor) when the rebalance completes."""
        return self._broker.join_group(self.principal, group_messages.JoinRequest(
            group_id=group_id, member_id=member_id, group_instance_id=group_instance_id, client_id=self.client_id,
            client_host=self.principal.host, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type, topics=frozenset(topics),
            assignors=tuple(assignors),
        ))

    def sync_group(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
                   ) -> Deferred[group_messages.SyncResponse]:
        """The member's assignment for its generation; fires with a ``SyncResponse``."""
        return self._broker.sync_group(self.principal, _member(group_id, member_id, group_instance_id, generation_id))

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> Deferred[None]:
        """Keep a member alive; fails with ``RebalanceInProgressError`` when it must rejoin.

        Kafka clients heartbeat from a background thread, so a heartbeat says nothing about the
        application polling; the client leaves the group itself when its poll interval passes.
        """
        return self._broker.heartbeat(self.principal, _member(group_id, member_id, group_instance_id, generation_id),
                                      True)

    def leave_group(self, group_id: str, member_id: str, group_instance_id: str | None) -> Deferred[None]:
        """Remove a member at once."""
        return self._broker.leave_group(self.principal, _member(group_id, member_id, group_instance_id))

    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                       offsets: Iterable[tuple[str, int, int, str, int]]) -> Deferred[None]:
        """Commit (topic, partition, offset, metadata, leader epoch or -1) positions durably."""
        return self._broker.commit_offsets(self.principal, _offset_commit(group_id, member_id, group_instance_id,
                                                                          generation_id, offsets))

    def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None,
                      require_stable: bool = False) -> Deferred[dict[TopicPartition, CommittedOffset | None]]:
        """``{TopicPartition: CommittedOffset | None}`` for ``partitions`` (None: every committed one)."""
        wanted = None if partitions is None else [TopicPartition(topic, partition) for topic, partition in partitions]
        return self._broker.fetch_offsets(self.principal, group_id, wanted, require_stable)

    def list_groups(self) -> Deferred[list[group_messages.GroupListing]]:
        """The ``GroupListing``s the principal may describe."""
        return self._broker.list_groups(self.principal)

    def describe_group(self, group_id: str) -> Deferred[group_messages.GroupDescription]:
        """A ``GroupDescription`` (state Dead when the group is unknown)."""
        return self._broker.describe_group(self.principal, group_id)

    def delete_group(self, group_id: str) -> Deferred[None]:
        """Delete an empty group and its offsets."""
        return self._broker.delete_group(self.principal, group_id)

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]
                       ) -> Deferred[dict[TopicPartition, BaseException | None]]:
        """Delete a group's committed offsets of (topic, partition)s; each one's outcome."""
        return self._broker.delete_offsets(self.principal, group_id,
                                           [TopicPartition(topic, partition) for topic, partition in partitions])


def _offset_commit(group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                   offsets: Iterable[tuple[str, int, int, str, int]]) -> group_messages.OffsetCommitRequest:
    commits = tuple(
        group_messages.PartitionCommit(topic_partition=TopicPartition(topic, partition), offset=offset,
                                       metadata=metadata, leader_epoch=None if leader_epoch < 0 else leader_epoch)
        for topic, partition, offset, metadata, leader_epoch in offsets
    )
    return group_messages.OffsetCommitRequest(group_id=group_id, member_id=member_id,
                                              group_instance_id=group_instance_id, generation_id=generation_id,
                                              offsets=commits)


def _member(group_id: str, member_id: str, group_instance_id: str | None,
            generation_id: int = group_messages.NO_GENERATION) -> group_messages.MemberRequest:
    return group_messages.MemberRequest(group_id=group_id, member_id=member_id, group_instance_id=group_instance_id,
                                        generation_id=generation_id)


def topic_config_keys() -> list[str]:
    """Every topic configuration key (the ones a broker has a default of, static or dynamic)."""
    return sorted(built_in_topic_configs())
