"""The blocking driver's view of the cluster: connections by broker, metadata, and routed requests.

``BlockingCluster`` opens one connection per broker on first use and keeps the ``ClusterView``
the producer, consumer and admin route by; ``ClusterRequests`` sends requests on the caller's
thread to any broker or to a partition's leader, retrying what is retriable.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from mqbroker.client import admin
from mqbroker.client.backoff import Backoff
from mqbroker.client.cluster import ClusterView
from mqbroker.client.connection import BlockingConnection, BrokerUnavailableError, parse_bootstrap
from mqbroker.client.security import ClientSecurity
from mqbroker.errors import BrokerError
from mqbroker.protocols.native.messages import MetadataRequest, MetadataResponse


def wall_clock_ms() -> int:
    """Wall-clock milliseconds (batch ages and metadata timestamps)."""
    return time.time_ns() // 1_000_000


T = TypeVar("T")


class BlockingCluster:
    """Connections by node id and the metadata view, for one thread's use."""

    def __init__(
        self, bootstrap: str | Sequence[str], client_id: str, timeout_s: float, security: ClientSecurity | None = None
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self.view = ClusterView()
        self.connections: dict[int, BlockingConnection] = {}
        self._any: BlockingConnection | None = None

    def any_connection(self) -> BlockingConnection:
        """A connection to some broker (bootstrap first, then known brokers)."""
        if self._any is not None:
            return self._any
        errors = []
        candidates = self.bootstrap + [address for node in self.view.node_ids if (address := self.view.address(node))]
        for host, port in candidates:
            try:
                self._any = BlockingConnection(host, port, self.client_id, self.timeout_s, self.security)
                return self._any
            except BrokerUnavailableError as error:
                errors.append(str(error))
        raise BrokerUnavailableError("no broker reachable: " + "; ".join(errors))

    def connection(self, node_id: int) -> BlockingConnection:
        """The connection to broker ``node_id``, opened on first use."""
        connection = self.connections.get(node_id)
        if connection is None:
            address = self.view.address(node_id)
            if address is None:
                raise BrokerUnavailableError(f"broker {node_id} is not in the cluster metadata")
            connection = BlockingConnection(address[0], address[1], self.client_id, self.timeout_s, self.security)
            self.connections[node_id] = connection
        return connection

    def refresh(self, topics: Iterable[str] | None, auto_create: bool = True) -> MetadataResponse:
        """Ask a broker for metadata about ``topics`` (None: all) and update the view."""
        names = None if topics is None else tuple(sorted(set(topics)))
        request = MetadataRequest(topics=names, allow_auto_topic_creation=auto_create)
        try:
            response = self.any_connection().request(request, self.timeout_s)
        except BrokerUnavailableError:
            self.drop_any()
            raise
        assert isinstance(response, MetadataResponse)
        self.view.update(response, wall_clock_ms())
        return response

    def drop(self, node_id: int) -> None:
        """Forget a broken connection (the next use reconnects)."""
        connection = self.connections.pop(node_id, None)
        if connection is not None:
            connection.close()
            if connection is self._any:
                self._any = None

    def drop_any(self) -> None:
        """Forget the broken bootstrap connection."""
        if self._any is not None and self._any not in self.connections.values():
            self._any.close()
        self._any = None

    def close(self) -> None:
        """Close every connection."""
        self.drop_any()
        for node_id in list(self.connections):
            self.drop(node_id)


class ClusterRequests:
    """Requests sent on the caller's thread: topic operations to any broker, partition ones to leaders, retried."""

    def __init__(self, cluster: BlockingCluster) -> None:
        self.cluster = cluster
        self._backoff = Backoff(initial_ms=50, max_ms=1000)
        self._rng = random.Random()

    def retrying(self, call: Callable[[], T], topic: str | None = None) -> T:
        """Run ``call`` again after retriable errors (a new controller or leader, a lost connection).

        Gives up at the request timeout. With ``topic``, its leaders are looked up again before a retry.
        """
        deadline = time.monotonic() + self.cluster.timeout_s
        attempt = 0
        while True:
            try:
                return call()
            except BrokerError as error:
                attempt += 1
                delay_s = self._backoff.delay_ms(attempt, self._rng) / 1000
                if not error.retriable or time.monotonic() + delay_s >= deadline:
                    raise
                if topic is not None:
                    self.cluster.view.invalidate(topic)
                time.sleep(delay_s)

    def any_broker(self, request: object) -> object:
        """Send ``request`` to some broker (a lost connection is dropped, so the next call tries another)."""
        try:
            return self.cluster.any_connection().request(request, self.cluster.timeout_s)
        except BrokerUnavailableError:
            self.cluster.drop_any()
            raise

    def leader(self, topic: str, partition: int, request: object) -> object:
        """Send ``request`` to the partition's leader, looked up again if unknown or shown stale."""
        node_id = self.cluster.view.leader(topic, partition)
        if node_id < 0 or topic in self.cluster.view.stale_topics:  # stale: a NOT_LEADER reply, see ``retrying``
            self.cluster.refresh([topic], auto_create=False)
            node_id = self.cluster.view.leader(topic, partition)
            if node_id < 0:
                error = self.cluster.view.topic_error(topic)
                raise error or BrokerUnavailableError(f"{topic}-{partition} has no leader")
        try:
            return self.cluster.connection(node_id).request(request, self.cluster.timeout_s)
        except BrokerUnavailableError:
            self.cluster.drop(node_id)
            raise

    def list_offset(self, topic: str, partition: int, timestamp_ms: int, isolation_level: int = 0) -> int:
        """Earliest (-2), latest (-1) or the first offset at or after ``timestamp_ms``, from the leader."""
        request = admin.list_offsets_request(topic, partition, timestamp_ms, isolation_level)
        return self.retrying(
            lambda: admin.list_offsets_result(self.leader(topic, partition, request)), topic  # type: ignore[arg-type]
        )
