"""Group membership for the blocking ``Consumer``: a heartbeat thread and a commit thread.

The heartbeat thread owns one connection to the group coordinator and drives the pure
``GroupMember``: it joins, syncs and heartbeats, and hands every ``AssignmentChange`` to the
poll thread. It does not rejoin while a change is unapplied, so the poll thread revokes and
commits what it lost before the next join (the cooperative contract); the poll thread keeps
fetching its other partitions meanwhile. Commits and committed-offset lookups run on a
second thread with its own coordinator connection, so they never wait behind a parked join;
running them in order on one thread keeps synchronous and asynchronous commits ordered.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from mqbroker.client.connection import BlockingConnection, BrokerUnavailableError
from mqbroker.client.group_member import (
    COORDINATOR_RETRY_MS,
    PATTERN_REFRESH_MS,
    AssignmentChange,
    GroupMember,
    MemberState,
    Step,
    TopicPartition,
    committed_offsets,
    coordinator_moved,
    retry_commit_request,
    matching_topics,
    offset_fetch_request,
    raise_for_commit,
)
from mqbroker.client.security import ClientSecurity
from mqbroker.errors import BrokerError
from mqbroker.protocols.native.messages import (
    CoordinatorType,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    JoinGroupResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)

#: Pause before reconnecting to an unreachable coordinator.
RETRY_S = 0.2


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def coordinator_connection(
    bootstrap: Sequence[tuple[str, int]], group_id: str, client_id: str, timeout_s: float,
    security: ClientSecurity | None = None, key_type: CoordinatorType = CoordinatorType.GROUP,
) -> BlockingConnection:
    """Ask a bootstrap broker which broker coordinates ``group_id`` (``key_type`` SHARE: hosts the share group;
    TRANSACTION: coordinates a transactional id) and connect to it.

    A broker that cannot say yet (COORDINATOR_NOT_AVAILABLE) raises that error; the caller retries.
    """
    failures = []
    for host, port in bootstrap:
        try:
            probe = BlockingConnection(host, port, client_id, timeout_s, security)
        except BrokerUnavailableError as error:
            failures.append(str(error))
            continue
        try:
            found = probe.request(FindCoordinatorRequest(key=group_id, key_type=key_type), timeout_s)
        except BrokerUnavailableError as error:
            failures.append(str(error))
            continue
        finally:
            probe.close()
        assert isinstance(found, FindCoordinatorResponse)
        return BlockingConnection(found.host, found.port, client_id, timeout_s, security)
    raise BrokerUnavailableError("no broker reachable to find the group coordinator: " + "; ".join(failures))


class GroupMembership:
    """Runs a ``GroupMember`` on a heartbeat thread; the poll thread takes changes and commits."""

    def __init__(
        self,
        member: GroupMember,
        *,
        bootstrap: Sequence[tuple[str, int]],
        client_id: str,
        request_timeout_s: float,
        pattern: re.Pattern[str] | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        self.member = member
        self._connect = lambda: coordinator_connection(bootstrap, member.settings.group_id, client_id,
                                                       request_timeout_s, security)
        self._timeout_s = request_timeout_s
        self._pattern = pattern
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stopping = False
        self.error: BaseException | None = None
        self._connection: BlockingConnection | None = None
        self._next_pattern_refresh_ms = 0
        self._commits = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mqbroker-commit")
        self._commit_connection: BlockingConnection | None = None
        self._thread = threading.Thread(target=self._run, name="mqbroker-heartbeat", daemon=True)
        self._thread.start()

    # -- the poll thread's side --------------------------------------------------------------

    def take_changes(self) -> list[AssignmentChange]:
        """Changes to apply now; call ``changes_applied`` once they are (revocations committed)."""
        with self._lock:
            if self.error is not None:
                raise self.error
            return self.member.take_changes()

    def changes_applied(self, count: int) -> None:
        """The poll thread applied ``count`` changes: the member may rejoin."""
        with self._lock:
            self.member.changes_applied(count)
            self._wake.notify_all()

    def commit_async(self, offsets: Mapping[TopicPartition, int]) -> Future[None]:
        """Commit ``offsets`` as the current generation, in order with every other commit."""
        request = self.member.commit_request(dict(offsets))
        return self._commits.submit(self._commit, request)

    def commit(self, offsets: Mapping[TopicPartition, int], timeout_s: float | None = None) -> None:
        """Commit and wait (up to ``timeout_s``: then TimeoutError); raises the broker's refusal
        (e.g. a fenced or stale member)."""
        self.commit_async(offsets).result(timeout_s)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Committed offsets of ``partitions`` (None where nothing is committed)."""
        return self._commits.submit(self._fetch_committed, list(partitions)).result()

    def close(self, leave: bool = True, timeout_s: float | None = None) -> None:
        """Stop heartbeating; leave the group (not for static members), close the connections.

        Waits on the coordinator for at most ``timeout_s`` in all (None: a request timeout per step);
        what is left then is abandoned (the session timeout removes the member).
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
            connection = self._connection
        if connection is not None and self.member.state is MemberState.JOINING:
            try:
                connection.socket.shutdown(socket.SHUT_RDWR)  # wake the thread out of its parked join
            except OSError:
                pass  # already closed by the thread itself
        self._thread.join(remaining_s(deadline))
        request = self.member.leave_request() if leave and not self._thread.is_alive() else None
        leave_timeout_s = remaining_s(deadline, self._timeout_s)
        if request is not None and leave_timeout_s:
            try:
                self._link().request(request, leave_timeout_s)
            except BrokerError:
                pass  # the session timeout removes the member instead
        self._drop_connection()
        closing = self._commits.submit(self._close_commit_connection)
        try:
            closing.result(remaining_s(deadline))
        except TimeoutError:
            pass  # a commit still waits for its answer: it ends at its request timeout, on its own thread
        self._commits.shutdown(wait=False)

    # -- the commit thread -------------------------------------------------------------------

    def _commit_link(self) -> BlockingConnection:
        if self._commit_connection is None:
            self._commit_connection = self._connect()
        return self._commit_connection

    def _commit_request(self, request: object, check: Callable[[object], None] = lambda response: None) -> object:
        """Send on the commit connection; while the coordinator moves (or is unreachable), find it and retry."""
        deadline_ms = _now_ms() + COORDINATOR_RETRY_MS
        while True:
            try:
                response = self._commit_link().request(request, self._timeout_s)
                check(response)
                return response
            except BrokerError as error:
                if not (isinstance(error, BrokerUnavailableError) or retry_commit_request(error)):
                    raise
                self._close_commit_connection()
                if self._stopping or _now_ms() + RETRY_S * 1000 >= deadline_ms:
                    raise
                time.sleep(RETRY_S)

    def _commit(self, request: object) -> None:
        self._commit_request(request, raise_for_commit)

    def _fetch_committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        response = self._commit_request(offset_fetch_request(self.member.settings.group_id, partitions))
        assert isinstance(response, OffsetFetchResponse)
        return committed_offsets(response, partitions)

    def _close_commit_connection(self) -> None:
        if self._commit_connection is not None:
            self._commit_connection.close()
            self._commit_connection = None

    # -- the heartbeat thread ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._step():
                pass
        except BaseException as error:  # surfaced to the poll thread by take_changes()
            with self._lock:
                self.error = error

    def _step(self) -> bool:
        """One round: join, heartbeat or wait, as the member says. False to stop."""
        try:
            self._refresh_pattern()
            with self._lock:
                if self._stopping:
                    return False
                step, wait_ms = self.member.next_step(_now_ms())
                if step is Step.WAIT:
                    self._wake.wait(wait_ms / 1000)  # changes_applied() and close() wake it early
                    return True
            if step is Step.JOIN:
                self._join()
            else:
                self._heartbeat()
        except BrokerUnavailableError:
            self._drop_connection()
            self._fail(BrokerUnavailableError("lost the group coordinator"))
            time.sleep(RETRY_S)
        except BrokerError as error:
            self._fail(error)
            if coordinator_moved(error):
                self._drop_connection()  # the next step asks which broker coordinates the group now
                time.sleep(RETRY_S)
        return True

    def _link(self) -> BlockingConnection:
        if self._connection is None:
            self._connection = self._connect()
        return self._connection

    def _join(self) -> None:
        request = self.member.join_request()
        join_timeout_s = self.member.settings.max_poll_interval_ms / 1000 + self._timeout_s
        joined = self._link().request(request, join_timeout_s)
        assert isinstance(joined, JoinGroupResponse)
        sync = self.member.join_completed(joined)
        synced = self._link().request(sync, self._timeout_s)
        assert isinstance(synced, SyncGroupResponse)
        with self._lock:
            self.member.sync_completed(synced, _now_ms())  # queued for the poll thread

    def _heartbeat(self) -> None:
        with self._lock:
            request = self.member.heartbeat_request(_now_ms())
        self._link().request(request, self._timeout_s)

    def _fail(self, error: BrokerError) -> None:
        with self._lock:
            if self._stopping and isinstance(error, BrokerUnavailableError):
                return
            self.member.failed(error)  # a loss is queued for the poll thread

    def _refresh_pattern(self) -> None:
        """A pattern subscription follows the topics that match it (internal topics excepted)."""
        if self._pattern is None or _now_ms() < self._next_pattern_refresh_ms:
            return
        self._next_pattern_refresh_ms = _now_ms() + PATTERN_REFRESH_MS
        response = self._link().request(MetadataRequest(topics=None, allow_auto_topic_creation=False), self._timeout_s)
        assert isinstance(response, MetadataResponse)
        topics = matching_topics(self._pattern, response)
        with self._lock:
            self.member.subscribe(topics)

    def _drop_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def remaining_s(deadline: float | None, cap_s: float | None = None) -> float | None:
    """Seconds left until the monotonic ``deadline`` (None: no deadline), at most ``cap_s``, never negative."""
    if deadline is None:
        return cap_s
    left_s = max(0.0, deadline - time.monotonic())
    return left_s if cap_s is None else min(left_s, cap_s)


def resolve_callback(callback: Callable[[set[TopicPartition]], None] | None) -> Callable[[set[TopicPartition]], None]:
    """A rebalance callback, or one that does nothing."""
    return callback if callback is not None else (lambda partitions: None)
