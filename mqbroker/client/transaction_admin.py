"""``TransactionAdmin``: what the transaction coordinators know (blocking; for ``mqbroker transactions``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mqbroker import errors
from mqbroker.client.blocking.transactions import CoordinatorCalls
from mqbroker.client.connection import BlockingConnection, BrokerUnavailableError, parse_bootstrap
from mqbroker.client.group_admin import live_broker_addresses
from mqbroker.client.security import ClientSecurity
from mqbroker.protocols.native import txn_messages as t
from mqbroker.protocols.native.messages import CoordinatorType


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionInfo:
    """One transactional id as its coordinator describes it."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    #: When the ongoing transaction began (ms since the epoch; -1: none ongoing).
    start_ms: int
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]


class TransactionAdmin:
    """Lists the transactional ids every broker coordinates and describes one at its coordinator."""

    def __init__(self, bootstrap: str | Sequence[str], *, request_timeout_ms: int = 30_000,
                 client_id: str = "mqbroker-admin", security: ClientSecurity | None = None) -> None:
        self._bootstrap = parse_bootstrap(bootstrap)
        self._timeout_s = request_timeout_ms / 1000
        self._client_id = client_id
        self._security = security
        self._calls = CoordinatorCalls(bootstrap=self._bootstrap, client_id=client_id, timeout_s=self._timeout_s,
                                       deadline_s=self._timeout_s, security=security)

    def list_transactions(self, states: Sequence[str] = ()) -> list[tuple[str, int, str]]:
        """``(transactional id, producer id, state)`` of every id (of ``states``, if given) on every live broker."""
        listed: dict[str, tuple[str, int, str]] = {}
        for host, port in live_broker_addresses(self._bootstrap, self._client_id, self._timeout_s, self._security):
            try:
                connection = BlockingConnection(host, port, self._client_id, self._timeout_s, self._security)
            except BrokerUnavailableError:
                continue  # its ids are moving to other brokers
            try:
                response = connection.request(t.ListTransactionsRequest(state_filters=tuple(states)), self._timeout_s)
            finally:
                connection.close()
            assert isinstance(response, t.ListTransactionsResponse)
            for item in response.transaction_states:
                listed[item.transactional_id] = (item.transactional_id, item.producer_id, item.transaction_state)
        return sorted(listed.values())

    def describe(self, transactional_id: str) -> TransactionInfo:
        """The id's state at its coordinator (TRANSACTIONAL_ID_NOT_FOUND if it has none)."""
        response = self._calls.request(transactional_id, CoordinatorType.TRANSACTION,
                                       t.DescribeTransactionsRequest(transactional_ids=(transactional_id,)))
        assert isinstance(response, t.DescribeTransactionsResponse)
        (found,) = response.transaction_states
        if found.error_code:
            raise errors.error_for_code(found.error_code, found.error_message or f"cannot describe {transactional_id!r}")
        return TransactionInfo(
            transactional_id=found.transactional_id, state=found.transaction_state, producer_id=found.producer_id,
            producer_epoch=found.producer_epoch, timeout_ms=found.transaction_timeout_ms,
            start_ms=found.transaction_start_time_ms, coordinator_epoch=found.coordinator_epoch,
            partitions=tuple((topic.topic, partition) for topic in found.topics for partition in topic.partitions))

    def close(self) -> None:
        """Close the coordinator connections."""
        self._calls.close()

    def __enter__(self) -> TransactionAdmin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
