"""The broker core: the one protocol-independent implementation of ``IBroker``, a facade over its services.

"tx-light": the services return Deferreds and schedule through an injected clock, and do no I/O
of their own beyond calling the storage library (appends on this thread, fsync through the
``Flusher``'s thread or AIO). The produce and fetch paths handle whole record batches: no
per-record work happens here. Each job is its own service:

- ``ProduceService`` (``core/produce.py``): appends, acks 0/1/all, the broker's own replicated appends;
- ``FetchService`` and ``WaitingFetches`` (``core/fetch.py``): reads, long-poll fetches, offset lookups;
- ``TopicAdmin`` (``core/topics.py``): metadata, topic admin, configs, partitions, delete-records;
- ``ProducerIds`` (``core/producer_ids.py``), ``GroupRequests`` over ``GroupHosting`` (``groups/hosting.py``);
- ``ShareRequests`` (``core/share_requests.py``) over ``ShareHosting`` (``shares/hosting.py``): share groups;
- ``TransactionRequests`` (``core/transactions.py``) over ``TransactionHosting`` (``transactions/hosting.py``),
  with the markers written by ``MarkerAppender`` and ``PartitionMarkers`` (``core/txn_markers.py``);
- ``SecurityRequests`` (``core/security_requests.py``): users and ACLs, authorized here, kept by an ``ISecurityAdmin``;
- ``ReplicaManager`` (``replication/replica_manager.py``): leadership, high watermarks, ISR, following;
- ``LocalLogs`` (``core/local_logs.py``): a partition log for every replica the image assigns here;
- ``LogMaintenance`` (``core/log_maintenance.py``): the timers' ISR checks, interval flushes, retention, producer expiry;
- ``BrokerStats`` (``core/broker_stats.py``): the counters and gauges the metrics and the admin API read.

The cluster is seen only through ``IClusterView``; this class wires the services and fans the
image's changes out to them in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from mqbroker.cluster.metadata import MetadataImage
from mqbroker.cluster.metadata_records import Record
from mqbroker.config import BrokerConfig
from mqbroker.core.broker_stats import BrokerStats
from mqbroker.core.fetch import FetchService, WaitingFetches
from mqbroker.core.group_requests import GroupRequests
from mqbroker.core.local_logs import LocalLogs
from mqbroker.core.log_maintenance import LogMaintenance
from mqbroker.core.produce import ProduceService
from mqbroker.core.producer_ids import ProducerIds
from mqbroker.core.security_requests import SecurityRequests
from mqbroker.core.share_requests import ShareRequests
from mqbroker.core.topic_config import TopicConfigLayers
from mqbroker.core.topics import TopicAdmin, internal_replication_factor
from mqbroker.core.transactions import TransactionRequests
from mqbroker.core.txn_markers import MarkerAppender, PartitionMarkers, TransactionPeers
from mqbroker.durability.flusher import Flusher
from mqbroker.groups import messages as group_messages
from mqbroker.groups.hosting import GroupHosting
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import CommittedOffset
from mqbroker.groups.service import OFFSETS_TOPIC, offsets_partition
from mqbroker.interfaces import IAuthorizer, IBroker, IClusterView, ISecurityAdmin
from mqbroker.model import (
    Acks,
    BrokerEndpoint,
    ClusterMetadata,
    FetchRequest,
    FetchResult,
    IsolationLevel,
    OffsetAndTimestamp,
    Operation,
    PartitionReassignment,
    Principal,
    ProduceResult,
    ProducerIdentity,
    TopicSpec,
)
from mqbroker.records.readable import UnreadableTally
from mqbroker.replication.replica_manager import Follower, ReplicaManager
from mqbroker.security.acl import Acl
from mqbroker.security.cluster_principals import ClusterPrincipals
from mqbroker.security.scram import ScramMechanism, ScramUpsertion
from mqbroker.shares import messages as share_messages
from mqbroker.shares.data import BrokerShareData
from mqbroker.shares.hosting import ShareHosting
from mqbroker.shares.push_hosting import PushFactory
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.manager import LogManager
from mqbroker.transactions import messages as txn_messages
from mqbroker.transactions.hosting import TransactionHosting


@implementer(IBroker)
class Broker:
    """A single broker's data plane: topics, partition logs, long-poll fetches, producer ids, groups."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        clock: IReactorTime,
        logs: LogManager,
        cluster: IClusterView,
        flusher_factory: Callable[[Callable[[Iterable[PartitionLog]], None]], Flusher],
        follower_factory: Callable[[ReplicaManager], Follower],
        authorizer: IAuthorizer,
        security_admin: ISecurityAdmin,
        principals: ClusterPrincipals | None = None,
        unreadable: UnreadableTally | None = None,
    ) -> None:
        """``flusher_factory(on_durable)`` builds the group-commit flusher, ``follower_factory(sink)`` the replica
        fetcher that follows the leaders of the partitions this broker does not lead; ``principals`` who acts
        for the cluster (by default as the configuration says); ``unreadable`` counts the batches the offsets
        replay skips (the broker's metric)."""
        self._config = config
        self._logs = logs
        self._cluster = cluster
        self._authorizer = authorizer
        principals = principals or ClusterPrincipals.from_config(config, broker_count=len(cluster.voters))
        self._stopping = False
        self._waiting = WaitingFetches(clock)
        self._replicas = ReplicaManager(config=config, clock=clock, logs=logs, cluster=cluster, readers=self._waiting,
                                        flusher_factory=flusher_factory, follower_factory=follower_factory)
        self._flusher = self._replicas.flusher
        #: The service's timers call its ISR checks, interval flushes, retention and producer expiry.
        self.maintenance = LogMaintenance(config=config, clock=clock, logs=logs, replicas=self._replicas,
                                          flusher=self._flusher)
        self._local_logs = LocalLogs(config=config, clock=clock, logs=logs, before_delete=self._waiting.complete)
        self._produce = ProduceService(clock=clock, authorizer=authorizer, replicas=self._replicas,
                                       flusher=self._flusher, principals=principals, cluster=cluster,
                                       topic_defaults=config.topic_defaults, node_id=config.node_id)
        self._fetch = FetchService(clock=clock, authorizer=authorizer, replicas=self._replicas, waiting=self._waiting,
                                   principals=principals)
        self._groups = GroupHosting(
            config=config, clock=clock, cluster=cluster, logs=logs, replicas=self._replicas,
            append_replicated=self._produce.append_replicated,
            offsets_replication_factor=internal_replication_factor(config, len(cluster.voters)),
            unreadable=unreadable,
        )
        self._group_requests = GroupRequests(authorizer=authorizer, hosting=self._groups)
        self._shares = ShareHosting(
            config=config, clock=clock, cluster=cluster, logs=logs, replicas=self._replicas,
            append_replicated=self._produce.append_replicated,
            replication_factor=internal_replication_factor(config, len(cluster.voters)),
        )
        self._share_requests = ShareRequests(authorizer=authorizer, hosting=self._shares)
        self._topics = TopicAdmin(config=config, cluster=cluster, authorizer=authorizer, replicas=self._replicas,
                                  topics_changed=self._groups.topics_changed, principals=principals)
        self._producer_ids = ProducerIds(cluster=cluster, authorizer=authorizer)
        self._transaction_peers: TransactionPeers | None = None
        self._markers = MarkerAppender(clock=clock, append=self._produce.append_replicated,
                                       transaction_ended=self._groups.transaction_ended,
                                       one_round=self._flusher.one_round)
        self._txn_hosting = TransactionHosting(
            config=config, clock=clock, cluster=cluster, logs=logs, replicas=self._replicas,
            append_replicated=self._produce.append_replicated,
            markers=PartitionMarkers(clock=clock, node_id=config.node_id, cluster=cluster, local=self._markers,
                                     peers=lambda: self._transaction_peers),
            allocate_producer_id=self._producer_ids.allocate, offsets_partition_of=self._offsets_partition_of,
            replication_factor=internal_replication_factor(config, len(cluster.voters)), one_round=self._flusher.one_round,
        )
        self._transactions = TransactionRequests(
            node_id=config.node_id, authorizer=authorizer, hosting=self._txn_hosting, groups=self._groups,
            replicas=self._replicas, produce=self._produce, markers=self._markers,
            peers=lambda: self._transaction_peers, logs=logs,
        )
        self._security = SecurityRequests(authorizer=authorizer, admin=security_admin)
        #: What the metrics collector and the admin API's counters read.
        self.stats = BrokerStats(node_id=config.node_id, cluster=cluster, logs=logs, produce=self._produce,
                                 fetch=self._fetch, groups=self._groups, shares=self._shares,
                                 transactions=self._transactions)
        cluster.add_image_listener(self._image_changed)

    def use_transaction_peers(self, peers: TransactionPeers) -> None:
        """How this broker reaches other brokers' transaction coordinators and partition leaders (cluster only)."""
        self._transaction_peers = peers

    def _offsets_partition_of(self, group_id: str) -> TopicPartition:
        """The ``__consumer_offsets`` partition a transaction adds for ``group_id``'s offsets."""
        record = self._cluster.topic(OFFSETS_TOPIC)
        count = len(record.partitions) if record is not None else self._config.offsets_topic_partitions
        return TopicPartition(OFFSETS_TOPIC, offsets_partition(group_id, count))

    def _image_changed(self, image: MetadataImage, record: Record | None) -> None:
        """Local logs first, then leaderships and following, then the groups of the led offsets partitions."""
        self._local_logs.image_changed(image, record)
        if self._stopping:
            return
        self._replicas.partitions_changed(image)
        self._groups.sync_coordinators()
        self._shares.sync()
        self._txn_hosting.sync_coordinators()
        self._topics.wake_live_broker_waiters(image)

    # -- produce and fetch -----------------------------------------------------------------

    def produce(
        self, principal: Principal, topic: str, partition: int, records: bytes, acks: Acks, timeout_ms: int,
        transactional_id: str | None = None, front_end_batches: bool = False, add_to_transaction: bool = False,
    ) -> Deferred[ProduceResult]:
        """Append a client's batches, creating the topic first if allowed; see ``IBroker.produce``."""
        if self._cluster.topic(topic) is None and self._topics.may_auto_create(principal, topic, Operation.WRITE):
            ensured = self._topics.ensure_topic(topic)
            ensured.addCallback(lambda _: self._transactions.produce(principal, topic, partition, records, acks,
                                                                     timeout_ms, transactional_id, front_end_batches,
                                                                     add_to_transaction))
            return ensured
        return self._transactions.produce(principal, topic, partition, records, acks, timeout_ms, transactional_id,
                                          front_end_batches, add_to_transaction)

    def fetch(self, principal: Principal, request: FetchRequest) -> Deferred[list[FetchResult]]:
        """Read batches for several partitions, long-polling; see ``IBroker.fetch``."""
        return self._fetch.fetch(principal, request)

    def wait_for_records(self, principal: Principal, topic: str, partition: int, position: Callable[[], int],
                         wait_ms_max: int, isolation_level: int = IsolationLevel.READ_UNCOMMITTED) -> Deferred[bool]:
        """Wait until a fetch from ``position()`` would find records; see ``IBroker.wait_for_records``."""
        return self._fetch.wait_for_records(principal, topic, partition, position, wait_ms_max, isolation_level)

    def replica_fetch(self, principal: Principal, replica_id: int, request: FetchRequest) -> Deferred[list[FetchResult]]:
        """A follower's long-poll fetch; see ``IBroker.replica_fetch``."""
        return self._fetch.replica_fetch(principal, replica_id, request)

    def list_offset(
        self, principal: Principal, topic: str, partition: int, timestamp_ms: int,
        isolation_level: int = IsolationLevel.READ_UNCOMMITTED,
    ) -> Deferred[OffsetAndTimestamp]:
        """Find an offset by position or time; see ``IBroker.list_offset``."""
        return self._fetch.list_offset(principal, topic, partition, timestamp_ms, isolation_level)

    def init_producer_id(
        self, principal: Principal, transactional_id: str | None, transaction_timeout_ms: int = -1
    ) -> Deferred[ProducerIdentity]:
        """A fresh producer id, or a transactional id's own with a new epoch; see ``IBroker.init_producer_id``."""
        if transactional_id is None:
            return self._producer_ids.init_producer_id(principal, transactional_id)
        return self._transactions.init_producer_id(principal, transactional_id, transaction_timeout_ms)

    # -- metadata and admin ----------------------------------------------------------------

    def metadata(
        self, principal: Principal, topics: Sequence[str] | None, allow_auto_create: bool
    ) -> Deferred[ClusterMetadata]:
        """Describe the brokers and the topics; see ``IBroker.metadata``."""
        return self._topics.metadata(principal, topics, allow_auto_create)

    def create_topic(self, principal: Principal, spec: TopicSpec, validate_only: bool) -> Deferred[None]:
        """Create a topic through the controller; see ``IBroker.create_topic``."""
        return self._topics.create_topic(principal, spec, validate_only)

    def delete_topic(self, principal: Principal, name: str) -> Deferred[None]:
        """Delete a topic and its data everywhere; see ``IBroker.delete_topic``."""
        return self._topics.delete_topic(principal, name)

    def describe_configs(self, principal: Principal, topic: str) -> Deferred[dict[str, str]]:
        """The topic's effective configuration; see ``IBroker.describe_configs``."""
        return self._topics.describe_configs(principal, topic)

    def alter_configs(
        self, principal: Principal, topic: str, set_configs: Mapping[str, str], delete_configs: Sequence[str]
    ) -> Deferred[None]:
        """Change topic config overrides; see ``IBroker.alter_configs``."""
        return self._topics.alter_configs(principal, topic, set_configs, delete_configs)

    def describe_config_layers(self, principal: Principal, topic: str | None) -> Deferred[TopicConfigLayers]:
        """A topic's configuration layer by layer; see ``IBroker.describe_config_layers``."""
        return self._topics.describe_config_layers(principal, topic)

    def alter_broker_configs(self, principal: Principal, broker_id: int | None, set_configs: Mapping[str, str],
                             delete_configs: Sequence[str], validate_only: bool = False) -> Deferred[None]:
        """Change dynamic topic defaults; see ``IBroker.alter_broker_configs``."""
        return self._topics.alter_broker_configs(principal, broker_id, set_configs, delete_configs, validate_only)

    def create_partitions(self, principal: Principal, topic: str, total_count: int) -> Deferred[None]:
        """Grow a topic; see ``IBroker.create_partitions``."""
        return self._topics.create_partitions(principal, topic, total_count)

    def delete_records(self, principal: Principal, topic: str, partition: int, before_offset: int) -> Deferred[int]:
        """Advance the log start offset; see ``IBroker.delete_records``."""
        return self._topics.delete_records(principal, topic, partition, before_offset)

    def reassign_partition(
        self, principal: Principal, topic: str, partition: int, target_replicas: Sequence[int]
    ) -> Deferred[None]:
        """Move a partition's replicas; see ``IBroker.reassign_partition``."""
        return self._topics.reassign_partition(principal, topic, partition, target_replicas)

    def list_reassignments(
        self, principal: Principal, topics: Sequence[str] | None
    ) -> Deferred[list[PartitionReassignment]]:
        """The reassignments in progress; see ``IBroker.list_reassignments``."""
        return self._topics.list_reassignments(principal, topics)

    def describe_quorum(self, principal: Principal) -> Deferred[dict[str, Any]]:
        """The controller quorum and brokers; see ``IBroker.describe_quorum``."""
        return self._topics.describe_quorum(principal)

    def replica_sizes(self, principal: Principal, topic: str) -> Deferred[dict[int, int]]:
        """Bytes on disk of the topic's replicas held here; see ``IBroker.replica_sizes``."""
        return self._topics.replica_sizes(principal, topic, self._logs)

    # -- consumer groups -------------------------------------------------------------------

    def start_groups(self, new_member_id: Callable[[str], str]) -> Deferred[None]:
        """Create ``__consumer_offsets`` if needed, then coordinate the groups of its partitions this broker leads.

        The topic is created (through the controller) only once ``internal_replication_factor``
        brokers are live; until then group requests answer COORDINATOR_NOT_AVAILABLE.
        """
        self._groups.start(new_member_id)
        self._txn_hosting.start()
        created = self._topics.create_if_missing(self._groups.offsets_topic_spec())
        created.addCallback(lambda _: self._groups.sync_coordinators())
        created.addCallback(lambda _: self._topics.create_if_missing(self._txn_hosting.topic_spec()))
        created.addCallback(lambda _: self._txn_hosting.sync_coordinators())
        return created

    def find_coordinator(self, principal: Principal, group_id: str) -> Deferred[BrokerEndpoint]:
        """The broker leading the group's offsets partition; see ``IBroker.find_coordinator``."""
        return self._group_requests.find_coordinator(principal, group_id)

    def join_group(
        self, principal: Principal, request: group_messages.JoinRequest
    ) -> Deferred[group_messages.JoinResponse]:
        """Join a group; see ``IBroker.join_group``."""
        return self._group_requests.join_group(principal, request)

    def sync_group(
        self, principal: Principal, request: group_messages.MemberRequest
    ) -> Deferred[group_messages.SyncResponse]:
        """A member's assignment; see ``IBroker.sync_group``."""
        return self._group_requests.sync_group(principal, request)

    def heartbeat(self, principal: Principal, request: group_messages.MemberRequest, polled: bool) -> Deferred[None]:
        """Keep a member alive; see ``IBroker.heartbeat``."""
        return self._group_requests.heartbeat(principal, request, polled)

    def leave_group(self, principal: Principal, request: group_messages.MemberRequest) -> Deferred[None]:
        """A member leaves; see ``IBroker.leave_group``."""
        return self._group_requests.leave_group(principal, request)

    def commit_offsets(self, principal: Principal, request: group_messages.OffsetCommitRequest) -> Deferred[None]:
        """Commit offsets durably; see ``IBroker.commit_offsets``."""
        return self._group_requests.commit_offsets(principal, request)

    def fetch_offsets(
        self, principal: Principal, group_id: str, partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
    ) -> Deferred[dict[TopicPartition, CommittedOffset | None]]:
        """Committed offsets; see ``IBroker.fetch_offsets``."""
        return self._group_requests.fetch_offsets(principal, group_id, partitions, require_stable)

    def list_groups(self, principal: Principal) -> Deferred[list[group_messages.GroupListing]]:
        """Groups coordinated here that the principal may describe; see ``IBroker.list_groups``."""
        return self._group_requests.list_groups(principal)

    def describe_group(self, principal: Principal, group_id: str) -> Deferred[group_messages.GroupDescription]:
        """A group's state and members; see ``IBroker.describe_group``."""
        return self._group_requests.describe_group(principal, group_id)

    def delete_group(self, principal: Principal, group_id: str) -> Deferred[None]:
        """Delete an empty group and its offsets; see ``IBroker.delete_group``."""
        return self._group_requests.delete_group(principal, group_id)

    # -- share groups ----------------------------------------------------------------------

    def start_share_groups(self, data_broker: IBroker, new_member_id: Callable[[str], str],
                           push_factory: PushFactory | None) -> Deferred[None]:
        """Create ``__share_group_state`` if needed, then host the share groups of the partitions this broker leads.

        Share groups read their topics and write dead letters through ``data_broker`` (the broker the
        front ends use, which forwards to the leaders of partitions led elsewhere).
        """
        self._shares.start(BrokerShareData(data_broker, self._partitions_of), new_member_id, push_factory)
        created = self._topics.create_if_missing(self._shares.state_topic_spec())
        created.addCallback(lambda _: self._shares.sync())
        return created

    def _partitions_of(self, topic: str) -> int:
        record = self._cluster.topic(topic)
        return len(record.partitions) if record is not None else 0

    def find_share_coordinator(self, principal: Principal, group_id: str) -> Deferred[BrokerEndpoint]:
        """The broker hosting a share group; see ``IBroker.find_share_coordinator``."""
        return self._share_requests.find_share_coordinator(principal, group_id)

    def share_group_heartbeat(
        self, principal: Principal, request: share_messages.ShareHeartbeatRequest
    ) -> Deferred[share_messages.ShareHeartbeatResponse]:
        """Join, stay in or leave a share group; see ``IBroker.share_group_heartbeat``."""
        return self._share_requests.share_group_heartbeat(principal, request)

    def share_fetch(
        self, principal: Principal, request: share_messages.ShareFetchRequest
    ) -> Deferred[share_messages.ShareFetchResponse]:
        """Acquire records of a share group; see ``IBroker.share_fetch``."""
        return self._share_requests.share_fetch(principal, request)

    def share_acknowledge(
        self, principal: Principal, request: share_messages.ShareAcknowledgeRequest
    ) -> Deferred[tuple[share_messages.AcknowledgeResult, ...]]:
        """Settle acquired records; see ``IBroker.share_acknowledge``."""
        return self._share_requests.share_acknowledge(principal, request)

    def create_share_group(self, principal: Principal, group_id: str, topics: Sequence[str],
                           configs: Mapping[str, str]) -> Deferred[None]:
        """Define a share group; see ``IBroker.create_share_group``."""
        return self._share_requests.create_share_group(principal, group_id, topics, configs)

    def alter_share_group(self, principal: Principal, group_id: str, topics: Sequence[str] | None,
                          set_configs: Mapping[str, str], delete_configs: Sequence[str]) -> Deferred[None]:
        """Change a share group; see ``IBroker.alter_share_group``."""
        return self._share_requests.alter_share_group(principal, group_id, topics, set_configs, delete_configs)

    def delete_share_group(self, principal: Principal, group_id: str) -> Deferred[None]:
        """Delete a share group; see ``IBroker.delete_share_group``."""
        return self._share_requests.delete_share_group(principal, group_id)

    def describe_share_group(
        self, principal: Principal, group_id: str
    ) -> Deferred[share_messages.ShareGroupDescription]:
        """A share group's state; see ``IBroker.describe_share_group``."""
        return self._share_requests.describe_share_group(principal, group_id)

    def list_share_groups(self, principal: Principal) -> Deferred[list[share_messages.ShareGroupListing]]:
        """The share groups hosted here; see ``IBroker.list_share_groups``."""
        return self._share_requests.list_share_groups(principal)

    def delete_offsets(self, principal: Principal, group_id: str, partitions: Sequence[TopicPartition]
                       ) -> Deferred[dict[TopicPartition, BaseException | None]]:
        """Delete some committed offsets of a group; see ``IBroker.delete_offsets``."""
        return self._group_requests.delete_offsets(principal, group_id, partitions)

    # -- transactions ------------------------------------------------------------------------

    def find_transaction_coordinator(self, principal: Principal, transactional_id: str) -> Deferred[BrokerEndpoint]:
        """The broker leading the id's ``__transaction_state`` partition; see ``IBroker.find_transaction_coordinator``."""
        return self._transactions.find_coordinator(principal, transactional_id)

    def add_partitions_to_txn(self, principal: Principal, request: txn_messages.AddPartitionsRequest) -> Deferred[Any]:
        """Add (or verify) partitions of a transaction; see ``IBroker.add_partitions_to_txn``."""
        return self._transactions.add_partitions(principal, request)

    def add_offsets_to_txn(self, principal: Principal, request: txn_messages.AddOffsetsRequest) -> Deferred[Any]:
        """Add a group's offsets to a transaction; see ``IBroker.add_offsets_to_txn``."""
        return self._transactions.add_offsets(principal, request)

    def end_txn(self, principal: Principal, request: txn_messages.EndTxnRequest) -> Deferred[Any]:
        """Commit or abort a transaction; see ``IBroker.end_txn``."""
        return self._transactions.end_txn(principal, request)

    def txn_commit_offsets(self, principal: Principal, request: txn_messages.TxnOffsetCommitRequest) -> Deferred[Any]:
        """Offsets inside a transaction; see ``IBroker.txn_commit_offsets``."""
        return self._transactions.txn_commit_offsets(principal, request)

    def write_txn_markers(
        self, principal: Principal, markers: Sequence[txn_messages.TransactionMarker]
    ) -> Deferred[Any]:
        """Append a coordinator's markers; see ``IBroker.write_txn_markers``."""
        return self._transactions.write_markers(principal, markers)

    def describe_transactions(self, principal: Principal, transactional_ids: Sequence[str]) -> Deferred[Any]:
        """Transactional ids' states; see ``IBroker.describe_transactions``."""
        return self._transactions.describe(principal, transactional_ids)

    def list_transactions(
        self, principal: Principal, states: Sequence[txn_messages.TransactionState], producer_ids: Sequence[int]
    ) -> Deferred[Any]:
        """Transactional ids coordinated here; see ``IBroker.list_transactions``."""
        return self._transactions.list_transactions(principal, frozenset(states), frozenset(producer_ids))

    # -- users and ACLs ---------------------------------------------------------------------

    def list_users(self, principal: Principal) -> Deferred[list[str]]:
        """Every user name; see ``IBroker.list_users``."""
        return self._security.list_users(principal)

    def upsert_user(self, principal: Principal, name: str, password: str, create: bool) -> Deferred[None]:
        """Add a user or change a password; see ``IBroker.upsert_user``."""
        return self._security.upsert_user(principal, name, password, create)

    def remove_user(self, principal: Principal, name: str) -> Deferred[None]:
        """Delete a user; see ``IBroker.remove_user``."""
        return self._security.remove_user(principal, name)

    def describe_users(self, principal: Principal) -> Deferred[dict[str, dict[ScramMechanism, int]]]:
        """Every user's SCRAM mechanisms and iterations; see ``IBroker.describe_users``."""
        return self._security.describe_users(principal)

    def alter_scram_credentials(self, principal: Principal, name: str, upsertions: Sequence[ScramUpsertion],
                                deletions: Sequence[ScramMechanism]) -> Deferred[None]:
        """Set credentials from salted passwords; see ``IBroker.alter_scram_credentials``."""
        return self._security.alter_scram_credentials(principal, name, upsertions, deletions)

    def list_acls(self, principal: Principal) -> Deferred[list[Acl]]:
        """Every ACL; see ``IBroker.list_acls``."""
        return self._security.list_acls(principal)

    def add_acls(self, principal: Principal, acls: Sequence[Acl]) -> Deferred[None]:
        """Store ACLs; see ``IBroker.add_acls``."""
        return self._security.add_acls(principal, acls)

    def remove_acls(self, principal: Principal, acls: Sequence[Acl]) -> Deferred[None]:
        """Delete ACLs; see ``IBroker.remove_acls``."""
        return self._security.remove_acls(principal, acls)

    def stop(self) -> Deferred[None]:
        """Refuse new produces, give up leaderships, answer waiting fetches, wait for the last fsync round."""
        self._stopping = True
        self._produce.stop()
        self._replicas.stop()
        self._groups.stop()
        self._shares.stop()
        self._txn_hosting.stop()
        self._topics.stop()
        self._waiting.complete_all()
        return self.maintenance.flush_all()
