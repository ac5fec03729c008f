"""``TransactionAdmin``: what the transaction coordinators know, and an operator's abort (blocking; for
``mqbroker transactions``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mqbroker import errors
from mqbroker.client.blocking.transactions import CoordinatorCalls
from mqbroker.client.connection import BlockingConnection, BrokerUnavailableError, parse_bootstrap
from mqbroker.client.group_admin import live_broker_addresses
from mqbroker.client.security import ClientSecurity
from mqbroker.protocols.native import txn_messages as t
from mqbroker.protocols.native.messages import CoordinatorType, InitProducerIdRequest, InitProducerIdResponse


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
    """Lists the transactional ids every broker coordinates, describes one at its coordinator, aborts one's
    open transaction."""

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

    def abort(self, transactional_id: str) -> TransactionInfo:
        """Abort the id's Ongoing transaction and fence its producer; the id's state afterwards.

        As Kafka's ``kafka-transactions force-terminate`` (Admin ``fenceProducers``): an InitProducerId
        for the id makes its coordinator bump the epoch and abort the open transaction, and answers once
        every partition has the ABORT marker. The producer that began it is fenced (PRODUCER_FENCED on its
        next call) and must be closed; read_committed readers held back by the transaction move on.
        Needs WRITE on the transactional id. Refused (INVALID_TXN_STATE) when no transaction is Ongoing.
        """
        info = self.describe(transactional_id)
        if info.state != "Ongoing":
            raise errors.InvalidTxnStateError(
                f"transactional id {transactional_id!r} has no ongoing transaction to abort (it is {info.state})"
                + ("; its decision is being carried out, wait for it" if info.state.startswith("Prepare") else ""))
        response = self._calls.request(transactional_id, CoordinatorType.TRANSACTION, InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=info.timeout_ms))
        assert isinstance(response, InitProducerIdResponse)
        return self.describe(transactional_id)

    def close(self) -> None:
        """Close the coordinator connections."""
        self._calls.close()

    def __enter__(self) -> TransactionAdmin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
