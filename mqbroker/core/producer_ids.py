"""Idempotent producer ids (tx-light): handed out from blocks the controller reserves cluster-wide."""

from __future__ import annotations

from twisted.internet.defer import Deferred, succeed

from mqbroker.core.guards import errors_as_failures, require_permission
from mqbroker.core.topic_config import PRODUCER_ID_BLOCK_SIZE
from mqbroker.interfaces import IAuthorizer, IClusterView
from mqbroker.model import (
    CLUSTER_RESOURCE,
    Operation,
    Principal,
    ProducerIdentity,
    ResourceType,
)


class ProducerIds:
    """Hands out producer ids, one reserved block (``PRODUCER_ID_BLOCK_SIZE``) at a time, so none is ever reused."""

    def __init__(self, *, cluster: IClusterView, authorizer: IAuthorizer) -> None:
        self._cluster = cluster
        self._authorizer = authorizer
        self._next_producer_id = 0
        self._block_end = 0

    @errors_as_failures
    def init_producer_id(self, principal: Principal, transactional_id: str | None) -> Deferred[ProducerIdentity]:
        """A fresh producer id with epoch 0; see ``IBroker.init_producer_id``."""
        require_permission(self._authorizer, principal, Operation.WRITE, ResourceType.CLUSTER, CLUSTER_RESOURCE)
        allocated = self.allocate()
        return allocated.addCallback(lambda producer_id: ProducerIdentity(producer_id=producer_id, producer_epoch=0))

    def allocate(self) -> Deferred[int]:
        """A producer id never handed out before (the transaction coordinator's, for a new transactional id)."""
        if self._next_producer_id < self._block_end:
            producer_id = self._next_producer_id
            self._next_producer_id += 1
            return succeed(producer_id)
        reserved = self._cluster.allocate_producer_ids(PRODUCER_ID_BLOCK_SIZE)
        reserved.addCallback(self._reserved)
        reserved.addCallback(lambda _: self.allocate())
        return reserved

    def _reserved(self, first: int) -> None:
        if self._next_producer_id >= self._block_end:  # another call may have taken a block meanwhile
            self._next_producer_id = first
            self._block_end = first + PRODUCER_ID_BLOCK_SIZE
