# -*- test-case-name: tests.interaction.test_transaction_scripts -*-
"""Partition leaders' verifications (KIP-890) waiting for their partitions to be listed in the producer's transaction.

Pure, a part of the ``TransactionCoordinator``: a producer may send AddPartitionsToTxn and its
first records at once, so a leader's verification can reach the coordinator before the write
listing the partition is durable (or before the request itself). Such a verification waits,
per transactional id, until it passes, fails for another reason (fencing), or its deadline
passes; the coordinator re-checks an id's verifications after each of its writes and at ticks.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass

from mqbroker.errors import BrokerError, InvalidTxnStateError
from mqbroker.transactions.messages import AddPartitionsRequest, Reply


@dataclass(frozen=True, slots=True, kw_only=True)
class _Waiting:
    request: AddPartitionsRequest
    request_key: Hashable
    deadline_ms: int


class WaitingVerifications:
    """The verifications waiting, per transactional id, each until its deadline."""

    def __init__(self, *, wait_ms: int, per_id_max: int) -> None:
        self._wait_ms = wait_ms
        self._per_id_max = per_id_max
        self._waiting: dict[str, list[_Waiting]] = {}

    def wait(self, request: AddPartitionsRequest, request_key: Hashable, now_ms: int) -> bool:
        """Keep ``request`` waiting (False: waiting is off, or the id has too many waiting already)."""
        waiting = self._waiting.setdefault(request.transactional_id, [])
        if not self._wait_ms or len(waiting) >= self._per_id_max:
            if not waiting:
                del self._waiting[request.transactional_id]
            return False
        waiting.append(_Waiting(request=request, request_key=request_key, deadline_ms=now_ms + self._wait_ms))
        return True

    def recheck(self, transactional_id: str, now_ms: int,
                verify: Callable[[AddPartitionsRequest], None]) -> list[Reply]:
        """``verify`` the id's waiting verifications again: the replies of those that pass, fail or expired."""
        replies, still = [], []
        for waiting in self._waiting.pop(transactional_id, []):
            try:
                verify(waiting.request)
            except InvalidTxnStateError as error:
                if now_ms < waiting.deadline_ms:
                    still.append(waiting)
                else:
                    replies.append(Reply(request_key=waiting.request_key, error=error))
            except BrokerError as error:
                replies.append(Reply(request_key=waiting.request_key, error=error))
            else:
                replies.append(Reply(request_key=waiting.request_key))
        if still:
            self._waiting[transactional_id] = still
        return replies

    def ids(self) -> list[str]:
        """The transactional ids with verifications waiting, sorted."""
        return sorted(self._waiting)

    def deadlines_ms(self) -> Iterator[int]:
        """When each waiting verification gives up."""
        return (waiting.deadline_ms for waiting_list in self._waiting.values() for waiting in waiting_list)

    def request_keys(self) -> list[Hashable]:
        """Every waiting verification's request key."""
        return [waiting.request_key for waiting_list in self._waiting.values() for waiting in waiting_list]
