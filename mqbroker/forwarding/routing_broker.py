"""The front ends' ``IBroker`` in a cluster: the local broker for what it leads, the leader for the rest.

"tx-light" like the broker: it returns Deferreds and waits through an injected clock. MQTT and
AMQP clients cannot re-route themselves the way native clients do (Metadata, then the leader), so
this wrapper does it for them. Metadata, admin and group calls go to the local broker unchanged
(it forwards what the controller or a group coordinator must do). Produce, fetch, list-offset
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

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from zope.interface import implementer

from mqbroker import errors
from mqbroker.forwarding import wire as forwarded
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.interfaces import IAuthorizer, IBroker
from mqbroker.model import FetchPosition, FetchResult, IsolationLevel, OffsetAndTimestamp, Operation, Principal, ProduceResult, ResourceType
from mqbroker.forwarding.routes import LeaderOf, Route, answered_enough, failed_results, merge_results, route_of, split_positions

#: acks=all produces that give no timeout wait this long (as the broker's default).
PRODUCE_TIMEOUT_MS_DEFAULT = 30_000
#: How long list-offset and delete-records calls keep re-routing through a leader change.
REROUTE_DEADLINE_MS = 5_000
#: Pause before routing a call again after its leader moved or could not be reached.
REROUTE_BACKOFF_S = 0.05
#: Errors after which a call is routed again: the leader moved, or could not be asked.
REROUTABLE_ERRORS = (errors.NotLeaderError, errors.LeaderNotAvailableError, errors.FencedLeaderEpochError,
                     BrokerUnavailableError)


class PeerRequests(Protocol):
    """What the routing broker needs to reach other brokers (``peers.PeerConnections``)."""

    def request(self, node_id: int, request: object, wait_s: float) -> Deferred[Any]: ...


def _served_locally(name: str) -> Callable[..., Any]:
    """A method handing the call unchanged to the local broker (no partition leader involved)."""

    def method(self: RoutingBroker, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.local, name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"The local broker's ``{name}``: the call needs no routing."
    return method


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

    metadata = _served_locally("metadata")
    create_topic = _served_locally("create_topic")
    delete_topic = _served_locally("delete_topic")
    describe_configs = _served_locally("describe_configs")
    alter_configs = _served_locally("alter_configs")
    create_partitions = _served_locally("create_partitions")
    init_producer_id = _served_locally("init_producer_id")
    describe_quorum = _served_locally("describe_quorum")
    replica_fetch = _served_locally("replica_fetch")
    reassign_partition = _served_locally("reassign_partition")
    list_reassignments = _served_locally("list_reassignments")
    find_coordinator = _served_locally("find_coordinator")
    join_group = _served_locally("join_group")
    sync_group = _served_locally("sync_group")
    heartbeat = _served_locally("heartbeat")
    leave_group = _served_locally("leave_group")
    commit_offsets = _served_locally("commit_offsets")
    fetch_offsets = _served_locally("fetch_offsets")
    list_groups = _served_locally("list_groups")
    describe_group = _served_locally("describe_group")
    delete_group = _served_locally("delete_group")
    # Transactions: the core reaches the coordinator and the partition leaders itself (TransactionPeers).
    find_transaction_coordinator = _served_locally("find_transaction_coordinator")
    add_partitions_to_txn = _served_locally("add_partitions_to_txn")
    add_offsets_to_txn = _served_locally("add_offsets_to_txn")
    end_txn = _served_locally("end_txn")
    txn_commit_offsets = _served_locally("txn_commit_offsets")
    write_txn_markers = _served_locally("write_txn_markers")
    describe_transactions = _served_locally("describe_transactions")
    list_transactions = _served_locally("list_transactions")

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

    def produce(self, principal: Principal, topic: str, partition: int, records: bytes, acks: int,
                timeout_ms: int, transactional_id: str | None = None) -> Deferred[ProduceResult]:
        """Append at the partition's leader; see ``IBroker.produce``."""
        deadline_ms = self._now_ms() + (timeout_ms if timeout_ms > 0 else PRODUCE_TIMEOUT_MS_DEFAULT)
        return self._routed(deadline_ms, lambda: self._produce_once(principal, topic, partition, records, acks,
                                                                    timeout_ms, transactional_id))

    def _produce_once(self, principal: Principal, topic: str, partition: int, records: bytes, acks: int,
                      timeout_ms: int, transactional_id: str | None) -> Deferred[ProduceResult]:
        leader = self.route(principal, Operation.WRITE, topic, partition)
        if leader is None:
            return self.local.produce(principal, topic, partition, records, acks, timeout_ms, transactional_id)
        wait_ms = timeout_ms if timeout_ms > 0 else PRODUCE_TIMEOUT_MS_DEFAULT
        request = forwarded.produce_request(topic, partition, records, acks, timeout_ms, transactional_id)
        sent = self._peers.request(leader, request, wait_ms / 1000.0)
        sent.addCallback(forwarded.produce_result, topic, partition, records)
        return sent

    # -- fetch -----------------------------------------------------------------------------

    def fetch(self, principal: Principal, positions: Sequence[FetchPosition], max_wait_ms: int, min_bytes: int,
              max_bytes: int, isolation_level: int = IsolationLevel.READ_UNCOMMITTED) -> Deferred[list[FetchResult]]:
        """Read from each partition's leader, one fetch per broker, merged; see ``IBroker.fetch``.

        Split over several brokers, the answer comes once every broker answered or one brought
        ``min_bytes`` or an error; the positions of brokers still waiting then read as empty.
        Each broker's fetch may return up to ``max_bytes``.
        """
        groups = split_positions(positions, lambda p: self.route(principal, Operation.READ, p.topic, p.partition))
        if len(groups) == 1:
            (route,) = groups
            return self._fetch_from(route, principal, positions, max_wait_ms, min_bytes, max_bytes, isolation_level)
        calls = {route: self._fetch_from(route, principal, [positions[index] for index in indices], max_wait_ms,
                                         min_bytes, max_bytes, isolation_level)
                 for route, indices in groups.items()}
        gathered = _gather_until_enough(calls, min_bytes)
        gathered.addCallback(lambda answered: merge_results(positions, groups, answered))
        return gathered

    def _fetch_from(self, route: Route, principal: Principal, positions: Sequence[FetchPosition], max_wait_ms: int,
                    min_bytes: int, max_bytes: int, isolation_level: int) -> Deferred[list[FetchResult]]:
        """One broker's share of a fetch; a leader that cannot be asked yields an error per position."""
        if route is None:
            return self.local.fetch(principal, positions, max_wait_ms, min_bytes, max_bytes, isolation_level)
        request = forwarded.fetch_request(positions, max_wait_ms, min_bytes, max_bytes, isolation_level)
        sent = self._peers.request(route, request, max(max_wait_ms, 0) / 1000.0)
        sent.addCallback(forwarded.fetch_results, positions)
        sent.addErrback(_trapped_as_results, positions)
        return sent

    # -- offsets ---------------------------------------------------------------------------

    def list_offset(self, principal: Principal, topic: str, partition: int, timestamp_ms: int,
                    isolation_level: int = IsolationLevel.READ_UNCOMMITTED) -> Deferred[OffsetAndTimestamp]:
        """Ask the partition's leader; see ``IBroker.list_offset``."""
        return self._routed(self._now_ms() + REROUTE_DEADLINE_MS,
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
        return self._routed(self._now_ms() + REROUTE_DEADLINE_MS,
                            lambda: self._delete_records_once(principal, topic, partition, before_offset))

    def _delete_records_once(self, principal: Principal, topic: str, partition: int, before_offset: int) -> Deferred[int]:
        leader = self.route(principal, Operation.DELETE, topic, partition)
        if leader is None:
            return self.local.delete_records(principal, topic, partition, before_offset)
        request = forwarded.delete_records_request(topic, partition, before_offset, REROUTE_DEADLINE_MS)
        sent = self._peers.request(leader, request, REROUTE_DEADLINE_MS / 1000.0)
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
