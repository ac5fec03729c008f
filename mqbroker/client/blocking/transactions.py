"""The blocking producer's transaction calls: to the transactional id's coordinator and the group's coordinator.

Each call runs on the application's thread over its own connections (the producer's I/O thread
keeps its sockets to the partition leaders). A call meeting a coordinator that moved, is
loading, is unreachable or is still finishing the previous transaction (CONCURRENT_TRANSACTIONS)
finds the coordinator again and retries, with backoff, until ``max_block_ms``; other errors are
raised typed. ``client/transaction_requests.py`` builds the requests; the pure
``TransactionTracker`` decides what is allowed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from mqbroker import errors
from mqbroker.client.backoff import Backoff
from mqbroker.client.blocking.group import coordinator_connection
from mqbroker.client.connection import BlockingConnection, BrokerUnavailableError
from mqbroker.client.security import ClientSecurity
from mqbroker.client.transaction_requests import FIND_AGAIN, WAIT
from mqbroker.protocols.native.messages import CoordinatorType


class CoordinatorCalls:
    """Sends requests to the coordinator of a key (transactional id or group), finding it again as it moves."""

    def __init__(
        self, *, bootstrap: list[tuple[str, int]], client_id: str, timeout_s: float, deadline_s: float,
        security: ClientSecurity | None,
    ) -> None:
        self._bootstrap = bootstrap
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._deadline_s = deadline_s
        self._security = security
        self._connections: dict[tuple[str, int], BlockingConnection] = {}
        self._backoff = Backoff(initial_ms=20, max_ms=500)
        self._random = random.Random()

    def request(
        self, key: str, key_type: CoordinatorType, request: object, check: Callable[[object], None] = lambda _: None
    ) -> object:
        """Send ``request`` to the coordinator of ``key``; retry what is retriable until the deadline."""
        deadline = time.monotonic() + self._deadline_s
        attempt = 0
        while True:
            try:
                response = self._connection(key, key_type).request(request, self._timeout_s)
                check(response)
                return response
            except errors.BrokerError as error:
                if isinstance(error, BrokerUnavailableError) or error.code in FIND_AGAIN:
                    self._drop(key, key_type)
                elif error.code not in WAIT:
                    raise
                attempt += 1
                delay_s = self._backoff.delay_ms(attempt, self._random) / 1000
                if time.monotonic() + delay_s >= deadline:
                    raise
                time.sleep(delay_s)

    def _connection(self, key: str, key_type: CoordinatorType) -> BlockingConnection:
        connection = self._connections.get((key, key_type))
        if connection is None:
            connection = coordinator_connection(self._bootstrap, key, self._client_id, self._timeout_s,
                                                self._security, key_type)
            self._connections[key, key_type] = connection
        return connection

    def _drop(self, key: str, key_type: CoordinatorType) -> None:
        connection = self._connections.pop((key, key_type), None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        """Close every coordinator connection."""
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
