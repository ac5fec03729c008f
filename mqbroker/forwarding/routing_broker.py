"""The front ends' ``IBroker`` in a cluster: the local broker for what it leads, the leader for the rest.

"tx-light" like the broker: it returns Deferreds and waits through an injected clock. MQTT and
AMQP clients cannot re-route themselves the way native clients do (Metadata, then the leader), so
this wrapper does it for them. Metadata, admin and group calls go to the local broker unchanged
(it forwards what the controller or a group coordinator must do). Share-group calls, admin and
data alike (heartbeat, fetch, acknowledge), go to the group's host (``share_routing``), so an AMQP
share queue consumed through several brokers has one owner of its leases. Produce, fetch, list-offset
and delete-records go to the local broker when the metadata image names this broker the
partition's leader (a single broker: always; one dict lookup), otherwise over the native
protocol to the leader (``PeerConnections``): produce with the same acks (acks=all fires once
the leader's high watermark passes the batch), fetch split per leader and merged back.

Authorization stays with the original principal: a forwarded call is authorized here first
(the local authorizer holds the same ACLs, replicated in the metadata); a refused call is
handed to the local broker, which reports the refusal as usual. The leader sees the
inter-broker principal (anonymous on plaintext, the broker certificate's principal under
``security.inter_broker_tls``), which must be allowed to do what the front ends do.
A produce, list-offset or delete-records call that meets NOT_LEADER_OR_FOLLOWER (locally or
at a leader) or an unreachable leader is routed again from the (by then refreshed) local image
until its deadline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from zope.interface import implementer

from mqbroker import errors, limits
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.forwarding import wire as forwarded
from mqbroker.forwarding.routes import (
    LeaderOf,
    Route,
    answered_enough,
    failed_results,
    merge_results,
    route_of,
    split_positions,
)
from mqbroker.forwarding.share_routing import ShareGroupRouting
from mqbroker.groups import messages as group_messages
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import CommittedOffset
from mqbroker.interfaces import IAuthorizer, IBroker
from mqbroker.limits import produce_timeout_ms_default
from mqbroker.model import (
    Acks,
    BrokerEndpoint,
    ClusterMetadata,
    FetchPosition,
    FetchRequest,
    FetchResult,
    IsolationLevel,
    OffsetAndTimestamp,
    Operation,
    PartitionReassignment,
    Principal,
    ProduceResult,
    ProducerIdentity,
    ResourceType,
    TopicSpec,
)
from mqbroker.security.acl import Acl
from mqbroker.security.scram import ScramMechanism, ScramUpsertion
from mqbroker.shares import messages as share_messages
from mqbroker.transactions import messages as txn

#: Pause before routing a call again after its leader moved or could not be reached.
REROUTE_BACKOFF_S = 0.05
#: Errors after which a call is routed again: the leader moved, or could not be asked.
REROUTABLE_ERRORS = (errors.NotLeaderError, errors.LeaderNotAvailableError, errors.FencedLeaderEpochError,
                     BrokerUnavailableError)


class PeerRequests(Protocol):
    """What the routing broker needs to reach other brokers (``peers.PeerConnections``)."""

    def request(self, node_id: int, request: object, wait_s: float) -> Deferred[Any]: ...


@implementer(IBroker)
class RoutingBroker:
    """An ``IBroker`` that serves each partition where it is led: locally, or forwarded to its leader."""

    def __init__(self, *, local: IBroker, node_id: int, leader_of: LeaderOf, peers: PeerRequests,
                 authorizer: IAuthorizer, clock: IReactorTime) -> None:
        self.local = local
        self._node_id = node_id
        self._leader_of = leader_of
        self._peers = peers
        self._authorizer = authorizer
        self._clock = clock
        #: Share-group calls at the group's host (the admin API uses it too).
        self.share_groups = ShareGroupRouting(local=local, node_id=node_id, peers=peers, authorizer=authorizer)

    # -- served by the local broker (no partition leader involved; it forwards what it must) ----

    def metadata(
        self, principal: Principal, topics: Sequence[str] | None, allow_auto_create: bool
    ) -> Deferred[ClusterMetadata]:
        """The local broker's ``metadata``."""
        return self.local.metadata(principal, topics, allow_auto_create)

    def create_topic(self, principal: Principal, spec: TopicSpec, validate_only: bool) -> Deferred[None]:
        """The local broker's ``create_topic``."""
        return self.local.create_topic(principal, spec, validate_only)

    def delete_topic(self, principal: Principal, name: str) -> Deferred[None]:
        """The local broker's ``delete_topic``."""
        return self.local.delete_topic(principal, name)

    def describe_configs(self, principal: Principal, topic: str) -> Deferred[dict[str, str]]:
        """The local broker's ``describe_configs``."""
        return self.local.describe_configs(principal, topic)

    def alter_configs(
        self, principal: Principal, topic: str, set_configs: Mapping[str, str], delete_configs: Sequence[str]
    ) -> Deferred[None]:
        """The local broker's ``alter_configs``."""
        return self.local.alter_configs(principal, topic, set_configs, delete_configs)

    def describe_config_layers(self, principal: Principal, topic: str | None) -> Deferred[Any]:
        """The local broker's ``describe_config_layers``."""
        return self.local.describe_config_layers(principal, topic)

    def alter_broker_configs(self, principal: Principal, broker_id: int | None, set_configs: Mapping[str, str],
                             delete_configs: Sequence[str], validate_only: bool = False) -> Deferred[None]:
        """The local broker's ``alter_broker_configs`` (the controller stores them)."""
        return self.local.alter_broker_configs(principal, broker_id, set_configs, delete_configs, validate_only)

    def create_partitions(self, principal: Principal, topic: str, total_count: int) -> Deferred[None]:
        """The local broker's ``create_partitions``."""
        return self.local.create_partitions(principal, topic, total_count)

    def init_producer_id(self, principal: Principal, transactional_id: str | None,
                         transaction_timeout_ms: int = -1) -> Deferred[ProducerIdentity]:
        """The local broker's ``init_producer_id``."""
        return self.local.init_producer_id(principal, transactional_id, transaction_timeout_ms)

    def describe_quorum(self, principal: Principal) -> Deferred[dict[str, Any]]:
        """The local broker's ``describe_quorum``."""
        return self.local.describe_quorum(principal)

    def replica_sizes(self, principal: Principal, topic: str) -> Deferred[dict[int, int]]:
        """The local broker's ``replica_sizes`` (bytes of the topic's replicas on this broker)."""
        return self.local.replica_sizes(principal, topic)

    def replica_fetch(self, principal: Principal, replica_id: int, request: FetchRequest) -> Deferred[list[FetchResult]]:
        """The local broker's ``replica_fetch`` (a follower asks its leader directly)."""
        return self.local.replica_fetch(principal, replica_id, request)

    def reassign_partition(
        self, principal: Principal, topic: str, partition: int, target_replicas: Sequence[int]
    ) -> Deferred[None]:
        """The local broker's ``reassign_partition``."""
        return self.local.reassign_partition(principal, topic, partition, target_replicas)

    def list_reassignments(
        self, principal: Principal, topics: Sequence[str] | None
    ) -> Deferred[list[PartitionReassignment]]:
        """The local broker's ``list_reassignments``."""
        return self.local.list_reassignments(principal, topics)

    def find_coordinator(self, principal: Principal, group_id: str) -> Deferred[BrokerEndpoint]:
        """The local broker's ``find_coordinator``."""
        return self.local.find_coordinator(principal, group_id)

    def join_group(self, principal: Principal, request: group_messages.JoinRequest) -> Deferred[group_messages.JoinResponse]:
        """The local broker's ``join_group``."""
        return self.local.join_group(principal, request)

    def sync_group(
        self, principal: Principal, request: group_messages.MemberRequest
    ) -> Deferred[group_messages.SyncResponse]:
        """The local broker's ``sync_group``."""
        return self.local.sync_group(principal, request)

    def heartbeat(self, principal: Principal, request: group_messages.MemberRequest, polled: bool) -> Deferred[None]:
        """The local broker's ``heartbeat``."""
        return self.local.heartbeat(principal, request, polled)

    def leave_group(self, principal: Principal, request: group_messages.MemberRequest) -> Deferred[None]:
        """The local broker's ``leave_group``."""
        return self.local.leave_group(principal, request)

    def commit_offsets(self, principal: Principal, request: group_messages.OffsetCommitRequest) -> Deferred[None]:
        """The local broker's ``commit_offsets``."""
        return self.local.commit_offsets(principal, request)

    def fetch_offsets(
        self, principal: Principal, group_id: str, partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
    ) -> Deferred[dict[TopicPartition, CommittedOffset | None]]:
        """The local broker's ``fetch_offsets``."""
        return self.local.fetch_offsets(principal, group_id, partitions, require_stable)

    def list_groups(self, principal: Principal) -> Deferred[list[group_messages.GroupListing]]:
        """The local broker's ``list_groups``."""
        return self.local.list_groups(principal)

    def describe_group(self, principal: Principal, group_id: str) -> Deferred[group_messages.GroupDescription]:
        """The local broker's ``describe_group``."""
        return self.local.describe_group(principal, group_id)

    def delete_group(self, principal: Principal, group_id: str) -> Deferred[None]:
        """The local broker's ``delete_group``."""
        return self.local.delete_group(principal, group_id)

    def find_share_coordinator(self, principal: Principal, group_id: str) -> Deferred[BrokerEndpoint]:
        """The local broker's ``find_share_coordinator``."""
        return self.local.find_share_coordinator(principal, group_id)

    def share_group_heartbeat(
        self, principal: Principal, request: share_messages.ShareHeartbeatRequest
    ) -> Deferred[share_messages.ShareHeartbeatResponse]:
        """Join, stay in or leave a share group at its host."""
        return Deferred.fromCoroutine(self.share_groups.heartbeat(principal, request))

    def share_fetch(
        self, principal: Principal, request: share_messages.ShareFetchRequest
    ) -> Deferred[share_messages.ShareFetchResponse]:
        """Acquire records at the group's host (which reads the group's partitions through its routing broker)."""
        return Deferred.fromCoroutine(self.share_groups.fetch(principal, request))

    def share_acknowledge(
        self, principal: Principal, request: share_messages.ShareAcknowledgeRequest
    ) -> Deferred[tuple[share_messages.AcknowledgeResult, ...]]:
        """Settle leased records at the group's host."""
        return Deferred.fromCoroutine(self.share_groups.acknowledge(principal, request))

    def create_share_group(
        self, principal: Principal, group_id: str, topics: Sequence[str], configs: Mapping[str, str]
    ) -> Deferred[None]:
        """Define a share group at its host."""
        return Deferred.fromCoroutine(self.share_groups.create(principal, group_id, topics, configs))

    def alter_share_group(self, principal: Principal, group_id: str, topics: Sequence[str] | None,
                          set_configs: Mapping[str, str], delete_configs: Sequence[str]) -> Deferred[None]:
        """Change a share group at its host."""
        return Deferred.fromCoroutine(self.share_groups.alter(principal, group_id, topics, set_configs,
                                                              delete_configs))

    def delete_share_group(self, principal: Principal, group_id: str) -> Deferred[None]:
        """Delete a share group without members at its host."""
        return Deferred.fromCoroutine(self.share_groups.delete(principal, group_id))

    def describe_share_group(
        self, principal: Principal, group_id: str
    ) -> Deferred[share_messages.ShareGroupDescription]:
        """A share group as its host describes it."""
        return Deferred.fromCoroutine(self.share_groups.describe(principal, group_id))

    def list_share_groups(self, principal: Principal) -> Deferred[list[share_messages.ShareGroupListing]]:
        """Every share group of the cluster the principal may describe."""
        return Deferred.fromCoroutine(self.share_groups.list(principal))

    def delete_offsets(self, principal: Principal, group_id: str, partitions: Sequence[TopicPartition]
                       ) -> Deferred[dict[TopicPartition, BaseException | None]]:
        """The local broker's ``delete_offsets``."""
        return self.local.delete_offsets(principal, group_id, partitions)

    # Transactions: the core reaches the coordinators and the partition leaders itself (TransactionPeers).

    def find_transaction_coordinator(self, principal: Principal, transactional_id: str) -> Deferred[BrokerEndpoint]:
        """The local broker's ``find_transaction_coordinator``."""
        return self.local.find_transaction_coordinator(principal, transactional_id)

    def add_partitions_to_txn(self, principal: Principal, request: txn.AddPartitionsRequest) -> Deferred[None]:
        """The local broker's ``add_partitions_to_txn``."""
        return self.local.add_partitions_to_txn(principal, request)

    def add_offsets_to_txn(self, principal: Principal, request: txn.AddOffsetsRequest) -> Deferred[None]:
        """The local broker's ``add_offsets_to_txn``."""
        return self.local.add_offsets_to_txn(principal, request)

    def end_txn(self, principal: Principal, request: txn.EndTxnRequest) -> Deferred[None]:
        """The local broker's ``end_txn``."""
        return self.local.end_txn(principal, request)

    def txn_commit_offsets(self, principal: Principal, request: txn.TxnOffsetCommitRequest) -> Deferred[None]:
        """The local broker's ``txn_commit_offsets``."""
        return self.local.txn_commit_offsets(principal, request)

    def write_txn_markers(
        self, principal: Principal, markers: Sequence[txn.TransactionMarker]
    ) -> Deferred[list[txn.MarkerOutcome]]:
        """The local broker's ``write_txn_markers``."""
        return self.local.write_txn_markers(principal, markers)

    def describe_transactions(self, principal: Principal, transactional_ids: Sequence[str]) -> Deferred[list[object]]:
        """The local broker's ``describe_transactions``."""
        return self.local.describe_transactions(principal, transactional_ids)

    def list_transactions(
        self, principal: Principal, states: Sequence[txn.TransactionState], producer_ids: Sequence[int]
    ) -> Deferred[list[txn.TransactionListing]]:
        """The local broker's ``list_transactions``."""
        return self.local.list_transactions(principal, states, producer_ids)

    def list_users(self, principal: Principal) -> Deferred[list[str]]:
        """The local broker's ``list_users``."""
        return self.local.list_users(principal)

    def upsert_user(self, principal: Principal, name: str, password: str, create: bool) -> Deferred[None]:
        """The local broker's ``upsert_user``."""
        return self.local.upsert_user(principal, name, password, create)

    def remove_user(self, principal: Principal, name: str) -> Deferred[None]:
        """The local broker's ``remove_user``."""
        return self.local.remove_user(principal, name)

    def describe_users(self, principal: Principal) -> Deferred[dict[str, dict[ScramMechanism, int]]]:
        """The local broker's ``describe_users``."""
        return self.local.describe_users(principal)

    def alter_scram_credentials(self, principal: Principal, name: str, upsertions: Sequence[ScramUpsertion],
                                deletions: Sequence[ScramMechanism]) -> Deferred[None]:
        """The local broker's ``alter_scram_credentials``."""
        return self.local.alter_scram_credentials(principal, name, upsertions, deletions)

    def list_acls(self, principal: Principal) -> Deferred[list[Acl]]:
        """The local broker's ``list_acls``."""
        return self.local.list_acls(principal)

    def add_acls(self, principal: Principal, acls: Sequence[Acl]) -> Deferred[None]:
        """The local broker's ``add_acls``."""
        return self.local.add_acls(principal, acls)

    def remove_acls(self, principal: Principal, acls: Sequence[Acl]) -> Deferred[None]:
        """The local broker's ``remove_acls``."""
        return self.local.remove_acls(principal, acls)

    # -- routing ---------------------------------------------------------------------------

    def route(self, principal: Principal, operation: Operation, topic: str, partition: int) -> Route:
        """The leader to forward to, or None for the local broker (it leads, nobody does, or the call is refused)."""
        route = route_of(self._leader_of(topic, partition), self._node_id)
        if route is not None and not self._authorizer.authorize(principal, operation, ResourceType.TOPIC, topic):
            return None  # the local broker refuses it with the usual typed error (and audit line)
        return route

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    def _routed(self, deadline_ms: int, attempt: Callable[[], Deferred[Any]]) -> Deferred[Any]:
        """Run ``attempt`` (which routes afresh each time) until it succeeds, fails otherwise, or time is up.

        Local calls are retried too: right after a leader change the image can name this broker a
        moment before its partition leads (or after it stopped), and the local broker says NOT_LEADER.
        """
        outcome: Deferred[Any] = Deferred()

        def run() -> None:
            attempt().addCallbacks(outcome.callback, retry_or_fail)

        def retry_or_fail(failure: Failure) -> None:
            if failure.check(*REROUTABLE_ERRORS) and self._now_ms() + REROUTE_BACKOFF_S * 1000 < deadline_ms:
                self._clock.callLater(REROUTE_BACKOFF_S, run)
            else:
                outcome.errback(failure)

        run()
        return outcome

    # -- produce ---------------------------------------------------------------------------

    def produce(self, principal: Principal, topic: str, partition: int, records: bytes, acks: Acks,
                timeout_ms: int, transactional_id: str | None = None, front_end_batches: bool = False,
                add_to_transaction: bool = False) -> Deferred[ProduceResult]:
        """Append at the partition's leader; see ``IBroker.produce`` (a forwarded batch is checked by its leader
        as a client's, ``add_to_transaction`` included)."""
        deadline_ms = self._now_ms() + (timeout_ms if timeout_ms > 0 else produce_timeout_ms_default)
        return self._routed(deadline_ms, lambda: self._produce_once(principal, topic, partition, records, acks,
                                                                    timeout_ms, transactional_id, front_end_batches,
                                                                    add_to_transaction))

    def _produce_once(self, principal: Principal, topic: str, partition: int, records: bytes, acks: Acks,
                      timeout_ms: int, transactional_id: str | None, front_end_batches: bool,
                      add_to_transaction: bool) -> Deferred[ProduceResult]:
        leader = self.route(principal, Operation.WRITE, topic, partition)
        if leader is None:
            return self.local.produce(principal, topic, partition, records, acks, timeout_ms, transactional_id,
                                      front_end_batches, add_to_transaction)
        wait_ms = timeout_ms if timeout_ms > 0 else produce_timeout_ms_default
        request = forwarded.produce_request(topic, partition, records, acks, timeout_ms, transactional_id,
                                            add_to_transaction)
        sent = self._peers.request(leader, request, wait_ms / 1000.0)
        sent.addCallback(forwarded.produce_result, topic, partition, records)
        return sent

    # -- fetch -----------------------------------------------------------------------------

    def fetch(self, principal: Principal, request: FetchRequest) -> Deferred[list[FetchResult]]:
        """Read from each partition's leader, one fetch per broker, merged; see ``IBroker.fetch``.

        Split over several brokers, the answer comes once every broker answered or one brought
        ``response_bytes_min`` or an error; the positions of brokers still waiting then read as
        empty. Each broker's fetch may return up to ``response_bytes_max``.
        """
        positions = request.positions
        groups = split_positions(positions, lambda p: self.route(principal, Operation.READ, p.topic, p.partition))
        if len(groups) == 1:
            (route,) = groups
            return self._fetch_from(route, principal, request)
        calls = {route: self._fetch_from(route, principal, dataclasses.replace(
                     request, positions=tuple(positions[index] for index in indices)))
                 for route, indices in groups.items()}
        gathered = _gather_until_enough(calls, request.response_bytes_min)
        gathered.addCallback(lambda answered: merge_results(positions, groups, answered))
        return gathered

    def _fetch_from(self, route: Route, principal: Principal, request: FetchRequest) -> Deferred[list[FetchResult]]:
        """One broker's share of a fetch; a leader that cannot be asked yields an error per position."""
        if route is None:
            return self.local.fetch(principal, request)
        sent = self._peers.request(route, forwarded.fetch_request(request), max(request.wait_ms_max, 0) / 1000.0)
        sent.addCallback(forwarded.fetch_results, request.positions)
        sent.addErrback(_trapped_as_results, request.positions)
        return sent

    def wait_for_records(self, principal: Principal, topic: str, partition: int, position: Callable[[], int],
                         wait_ms_max: int, isolation_level: int = IsolationLevel.READ_UNCOMMITTED) -> Deferred[bool]:
        """The local broker watches a partition it leads; one led elsewhere answers False at once (the caller
        long-polls ``fetch``, which goes to the leader); see ``IBroker.wait_for_records``."""
        if self.route(principal, Operation.READ, topic, partition) is not None:
            return succeed(False)
        return self.local.wait_for_records(principal, topic, partition, position, wait_ms_max, isolation_level)

    # -- offsets ---------------------------------------------------------------------------

    def list_offset(self, principal: Principal, topic: str, partition: int, timestamp_ms: int,
                    isolation_level: int = IsolationLevel.READ_UNCOMMITTED) -> Deferred[OffsetAndTimestamp]:
        """Ask the partition's leader; see ``IBroker.list_offset``."""
        return self._routed(self._now_ms() + limits.reroute_ms_max,
                            lambda: self._list_offset_once(principal, topic, partition, timestamp_ms, isolation_level))

    def _list_offset_once(self, principal: Principal, topic: str, partition: int,
                          timestamp_ms: int, isolation_level: int) -> Deferred[OffsetAndTimestamp]:
        leader = self.route(principal, Operation.DESCRIBE, topic, partition)
        if leader is None:
            return self.local.list_offset(principal, topic, partition, timestamp_ms, isolation_level)
        request = forwarded.list_offsets_request(topic, partition, timestamp_ms, isolation_level)
        sent = self._peers.request(leader, request, 0.0)
        sent.addCallback(forwarded.list_offset_result, topic, partition)
        return sent

    def delete_records(self, principal: Principal, topic: str, partition: int, before_offset: int) -> Deferred[int]:
        """Advance the log start at the partition's leader; see ``IBroker.delete_records``."""
        return self._routed(self._now_ms() + limits.reroute_ms_max,
                            lambda: self._delete_records_once(principal, topic, partition, before_offset))

    def _delete_records_once(self, principal: Principal, topic: str, partition: int, before_offset: int) -> Deferred[int]:
        leader = self.route(principal, Operation.DELETE, topic, partition)
        if leader is None:
            return self.local.delete_records(principal, topic, partition, before_offset)
        request = forwarded.delete_records_request(topic, partition, before_offset, limits.reroute_ms_max)
        sent = self._peers.request(leader, request, limits.reroute_ms_max / 1000.0)
        sent.addCallback(forwarded.delete_records_result, topic, partition)
        return sent


def _trapped_as_results(failure: Failure, positions: Sequence[FetchPosition]) -> list[FetchResult]:
    """A broker error of a whole forwarded fetch becomes each position's error (others propagate)."""
    failure.trap(errors.BrokerError)
    return failed_results(positions, failure.value)


def _gather_until_enough(calls: Mapping[Route, Deferred[list[FetchResult]]],
                         min_bytes: int) -> Deferred[dict[Route, list[FetchResult]]]:
    """Fire with the answers so far once all arrived, or those arrived brought an error or enough bytes.

    Answers already there when this is called all count. A fetch still waiting then completes
    unobserved: reads change nothing, so dropping its answer is safe.
    """
    answered: dict[Route, list[FetchResult]] = {}
    done: Deferred[dict[Route, list[FetchResult]]] = Deferred()
    registering = True

    def check() -> None:
        if not done.called and (len(answered) == len(calls) or answered_enough(answered.values(), min_bytes)):
            done.callback(dict(answered))

    def arrived(results: list[FetchResult], route: Route) -> None:
        answered[route] = results
        if not registering:
            check()

    def failed(failure: Failure) -> None:
        if not done.called:
            done.errback(failure)

    for route, call in calls.items():
        call.addCallback(arrived, route)
        call.addErrback(failed)
    registering = False
    check()
    return done
