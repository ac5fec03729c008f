"""The Twisted ``TwistedAdmin``: topic administration returning Deferreds."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTCP

from mqbroker.client import admin
from mqbroker.client.security import ClientSecurity
from mqbroker.client.twisted.cluster import TwistedCluster
from mqbroker.protocols.native.messages import MetadataResponse


class TwistedAdmin:
    """Topic administration returning Deferreds."""

    def __init__(self, reactor: IReactorTCP, bootstrap: str | Sequence[str] = "localhost:9393", *,
                 security: ClientSecurity | None = None) -> None:
        self._cluster = TwistedCluster(reactor, bootstrap, "mqbroker-admin", security)

    async def _call(self, request: object, read: Any) -> Any:
        return read(await self._cluster.request(None, request))

    def create_topics(self, names: Iterable[str], partitions: int = -1, replication_factor: int = -1) -> Deferred[None]:
        """Create topics."""
        request = admin.create_topics_request(names, partitions, replication_factor, None)
        return Deferred.fromCoroutine(self._call(request, admin.create_topics_result))

    def delete_topics(self, names: Iterable[str]) -> Deferred[None]:
        """Delete topics."""
        return Deferred.fromCoroutine(self._call(admin.delete_topics_request(names), admin.delete_topics_result))

    def create_partitions(self, topic: str, total_count: int) -> Deferred[None]:
        """Grow a topic."""
        request = admin.create_partitions_request(topic, total_count)
        return Deferred.fromCoroutine(self._call(request, admin.create_partitions_result))

    def metadata(self, topics: Iterable[str] | None = None) -> Deferred[MetadataResponse]:
        """Brokers and leaders of ``topics`` (None: every topic)."""
        return Deferred.fromCoroutine(self._cluster.refresh(topics, auto_create=False))

    def close(self, timeout: float | None = None) -> Deferred[None]:
        """Close the connections (at once: nothing is in flight between calls; ``timeout`` is accepted
        so that every client closes alike)."""
        self._cluster.close()
        return succeed(None)
