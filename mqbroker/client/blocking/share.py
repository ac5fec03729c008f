"""The blocking ``ShareConsumer``: records of a share group leased to this consumer, acknowledged one by one.

Any number of share consumers read the same partitions: each ``poll`` returns records leased to
this one only (for the group's ``lease.ms`` or ``lease_ms``), and the application settles each
with ``ack``, ``release``, ``reject`` or ``extend_lease``. Verdicts queue up and travel with the
next ``poll`` (or ``commit``, which sends them and returns their outcomes). A record not settled
before its lease ends goes to another consumer. A heartbeat thread keeps the membership alive on
its own connection to the group's host; ``poll`` fetches on the caller's thread. A poll interrupted while it
waits for its fetch (KeyboardInterrupt, say) leaves the fetch in flight: the next poll takes its answer (the
records it leased, the outcomes of the verdicts it carried), or reports those verdicts failed if it is lost.

    consumer = ShareConsumer("localhost:9393", group_id="billing", topics=["orders"])
    for message in consumer.poll(timeout=1.0):
        try:
            handle(message)
            consumer.ack(message)
        except Exception as error:
            consumer.release(message, error=str(error))   # or reject(...) to dead-letter it
    consumer.commit(); consumer.close()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from mqbroker.client.blocking.group import coordinator_connection, remaining_s
from mqbroker.client.connection import (
    BlockingConnection,
    parse_bootstrap,
)
from mqbroker.client.security import ClientSecurity
from mqbroker.client.share_core import (
    COORDINATOR_RETRY_MS,
    AcknowledgedCallback,
    AcknowledgeOutcome,
    Rejoin,
    ShareConsumerCore,
    ShareMembership,
    ShareMessage,
    failed_outcomes,
)
from mqbroker.errors import BrokerError, RequestTimedOutError
from mqbroker.model import AcknowledgeType
from mqbroker.protocols.native.messages import CoordinatorType
from mqbroker.protocols.native.share_messages import (
    ShareAcknowledgeResponse,
    ShareFetchResponse,
    ShareGroupHeartbeatResponse,
)


class _Fetch(NamedTuple):
    """A share fetch in flight."""

    connection: BlockingConnection
    correlation_id: int
    #: The verdicts it carries, to match the outcomes of its answer.
    sent: list[AcknowledgeOutcome]
    #: ``time.monotonic()`` by which its answer is due.
    due: float


class ShareConsumer:
    """A member of a share group over plain sockets."""

    def __init__(self, bootstrap: str | Sequence[str] = "localhost:9393", *, group_id: str, topics: Sequence[str],
                 client_id: str = "mqbroker-share-consumer", records_max: int = 500, fetch_wait_ms: int = 500,
                 lease_ms: int | None = None, request_timeout_s: float = 30.0, security: ClientSecurity | None = None,
                 on_acknowledged: AcknowledgedCallback | None = None) -> None:
        self._bootstrap = parse_bootstrap(bootstrap)
        self._client_id = client_id
        self._security = security
        self._timeout_s = request_timeout_s
        self._fetch_wait_ms = fetch_wait_ms
        self._membership = ShareMembership(group_id, topics)
        self._core = ShareConsumerCore(group_id, records_max=records_max, lease_ms=-1 if lease_ms is None else lease_ms,
                                       on_acknowledged=on_acknowledged)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stopping = False
        self._error: BaseException | None = None
        self._connection: BlockingConnection | None = None  # the poll thread's
        #: The fetch sent by a poll that was interrupted while it waited: the next poll takes its answer.
        self._fetch: _Fetch | None = None
        self._heartbeat_connection: BlockingConnection | None = None
        self._thread = threading.Thread(target=self._heartbeats, name="mqbroker-share-heartbeat", daemon=True)
        self._thread.start()

    def wait_joined(self, timeout: float) -> bool:
        """Whether this consumer is a member of its group, waiting up to ``timeout`` seconds for the join."""
        return self._wait_joined(time.monotonic() + timeout) is not None

    # -- fetching ------------------------------------------------------------------------------

    def poll(self, timeout: float = 1.0) -> list[ShareMessage]:
        """Records leased to this consumer (waiting up to ``timeout`` seconds); sends queued verdicts first."""
        held = self._core.take_held()  # leased by a poll whose ``on_acknowledged`` raised
        if held:
            return held
        deadline = time.monotonic() + timeout
        member_id = self._wait_joined(deadline)
        if member_id is None or self._raise_failure():  # held back from the last poll, which had records
            return []
        if self._fetch is None:
            wait_ms = max(0, min(self._fetch_wait_ms, int((deadline - time.monotonic()) * 1000)))
            request, sent = self._core.fetch_request(member_id, wait_ms)
            try:
                link = self._link()
                due = time.monotonic() + self._timeout_s + wait_ms / 1000
                self._fetch = _Fetch(link, link.send(request), sent, due)
            except BrokerError as error:
                self._core.report(failed_outcomes(sent, error))
                self._recover(error)
                return []
        fetch = self._fetch
        try:
            response = self._answer(fetch, fetch.due - time.monotonic())
        except BrokerError as error:
            self._fetch = None
            self._core.report(failed_outcomes(fetch.sent, error))
            self._recover(error)
            return []
        self._fetch = None
        messages = self._core.hand_over(*self._core.fetch_completed(response, fetch.sent))
        if not messages:
            self._raise_failure()
        return messages

    @staticmethod
    def _answer(fetch: _Fetch, timeout_s: float) -> ShareFetchResponse:
        """Wait up to ``timeout_s`` for ``fetch``'s answer (interrupted, it stays in flight); RequestTimedOutError
        when none came (the fetch is then abandoned)."""
        response = fetch.connection.wait_response(fetch.correlation_id, max(0.0, timeout_s))
        if response is None:
            fetch.connection.abandon(fetch.correlation_id)
            raise RequestTimedOutError(f"no share fetch answer from {fetch.connection.address}")
        assert isinstance(response, ShareFetchResponse)
        return response

    def _raise_failure(self) -> bool:
        """Raise the error a fetch reply held for the application (a batch that does not decode); from one that a
        retry fixes (the host moved), recover instead. Whether there was one."""
        try:
            self._core.raise_failure()
        except BrokerError as error:
            self._recover(error)  # raises what no retry can fix
            return True
        return False

    # -- settling ------------------------------------------------------------------------------

    def ack(self, message: ShareMessage) -> None:
        """The record is processed: done (sent with the next poll or commit)."""
        self._core.acknowledge([message], AcknowledgeType.ACCEPT)

    def release(self, message: ShareMessage, error: str = "") -> None:
        """Give the record back: it is delivered again (to any consumer) until its delivery limit."""
        self._core.acknowledge([message], AcknowledgeType.RELEASE, error)

    def reject(self, message: ShareMessage, error: str = "") -> None:
        """The record cannot be processed: it goes to the group's dead-letter topic with ``error``."""
        self._core.acknowledge([message], AcknowledgeType.REJECT, error)

    def acknowledge(self, messages: Iterable[ShareMessage], kind: AcknowledgeType = AcknowledgeType.ACCEPT,
                    error: str = "") -> None:
        """One verdict for many records (consecutive offsets travel as one range)."""
        self._core.acknowledge(messages, kind, error)

    def commit(self) -> list[AcknowledgeOutcome]:
        """Send the queued verdicts now; their outcomes (``error`` None: stored by the broker)."""
        member_id = self._membership.member_id
        request, sent = self._core.acknowledge_request(member_id)
        if request is None:
            return []
        return self._send_acknowledgements(request, sent)

    def extend_lease(self, messages: Iterable[ShareMessage], lease_ms: int) -> list[AcknowledgeOutcome]:
        """Keep ``messages`` leased for ``lease_ms`` more (slow work); their outcomes."""
        request, sent = self._core.renew_request(self._membership.member_id, messages, lease_ms)
        return self._send_acknowledgements(request, sent)

    def _send_acknowledgements(self, request: object, sent: list[AcknowledgeOutcome],
                               timeout_s: float | None = None) -> list[AcknowledgeOutcome]:
        try:
            response = self._link().request(request, self._timeout_s if timeout_s is None else timeout_s)
            assert isinstance(response, ShareAcknowledgeResponse)
            outcomes = self._core.acknowledge_completed(response, sent)
        except BrokerError as error:
            outcomes = failed_outcomes(sent, error)
            self._recover(error)
        self._core.report(outcomes)
        return outcomes

    # -- the group's host ----------------------------------------------------------------------

    def _link(self) -> BlockingConnection:
        if self._connection is None:
            self._connection = self._connect()
        return self._connection

    def _connect(self) -> BlockingConnection:
        return coordinator_connection(self._bootstrap, self._membership.group_id, self._client_id, self._timeout_s,
                                      self._security, key_type=CoordinatorType.SHARE)

    def _recover(self, error: BrokerError) -> None:
        """After a failed call: reconnect (the host moved or was unreachable) or rejoin (this member is unknown)."""
        with self._lock:
            action = self._membership.failed(error)  # raises what no retry can fix
            self._changed.notify_all()
        if action is Rejoin.FIND_COORDINATOR and self._connection is not None:
            self._connection.close()
            self._connection = None
            fetch, self._fetch = self._fetch, None
            if fetch is not None:  # an interrupted poll's fetch, lost with the connection
                self._core.report(failed_outcomes(fetch.sent, error))
            time.sleep(COORDINATOR_RETRY_MS / 1000)

    def _wait_joined(self, deadline: float) -> str | None:
        with self._lock:
            while not self._membership.joined:
                if self._error is not None:
                    raise self._error
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopping:
                    return None
                self._changed.wait(remaining)
            return self._membership.member_id

    def _heartbeats(self) -> None:
        """The heartbeat thread: join, then heartbeat every interval; find the host again when it moves."""
        while True:
            with self._lock:
                if self._stopping:
                    return
                request = self._membership.heartbeat_request()
            try:
                if self._heartbeat_connection is None:
                    self._heartbeat_connection = self._connect()
                response = self._heartbeat_connection.request(request, self._timeout_s)
                assert isinstance(response, ShareGroupHeartbeatResponse)
            except BrokerError as error:
                if not self._heartbeat_failed(error):
                    return
                continue
            with self._lock:
                self._membership.heartbeat_completed(response)
                self._changed.notify_all()
                if not self._stopping:
                    self._changed.wait(self._membership.heartbeat_interval_ms / 1000)

    def _heartbeat_failed(self, error: BrokerError) -> bool:
        """Whether to go on heartbeating after ``error`` (a fatal one is raised by the next poll)."""
        with self._lock:
            try:
                action = self._membership.failed(error)
            except BrokerError as fatal:
                self._error = fatal
                self._changed.notify_all()
                return False
            self._changed.notify_all()
        if action is Rejoin.FIND_COORDINATOR:
            if self._heartbeat_connection is not None:
                self._heartbeat_connection.close()
                self._heartbeat_connection = None
            with self._lock:
                self._changed.wait(COORDINATOR_RETRY_MS / 1000)
        return True

    # -- the end -------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Send the queued verdicts, leave the group (what this consumer holds is released), disconnect;
        waiting on the broker for at most ``timeout`` seconds in all (None: a request timeout per step)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        fetch, self._fetch = self._fetch, None
        if fetch is not None:  # an interrupted poll's: the outcomes of its verdicts (its records go with the leave)
            timeout_s = (fetch.due if deadline is None else min(fetch.due, deadline)) - time.monotonic()
            try:
                outcomes = self._core.fetch_completed(self._answer(fetch, timeout_s), fetch.sent)[1]
            except BrokerError as error:
                outcomes = failed_outcomes(fetch.sent, error)
            self._core.report(outcomes)
        if self._membership.joined:
            request, sent = self._core.acknowledge_request(self._membership.member_id)
            if request is not None and _time_left(deadline):
                try:
                    self._send_acknowledgements(request, sent, remaining_s(deadline, self._timeout_s))
                except BrokerError:
                    pass  # the records go back to the group when their leases end
        with self._lock:
            self._stopping = True
            self._changed.notify_all()
        self._thread.join(remaining_s(deadline))
        if self._membership.joined and _time_left(deadline):
            try:
                self._link().request(self._membership.leave_request(), remaining_s(deadline, self._timeout_s))
            except BrokerError:
                pass  # the session timeout removes this member instead
        for connection in (self._connection, self._heartbeat_connection):
            if connection is not None:
                connection.close()
        self._connection = self._heartbeat_connection = None

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _time_left(deadline: float | None) -> bool:
    """Whether a monotonic ``deadline`` (None: none) still leaves time for a request."""
    return deadline is None or deadline > time.monotonic()
