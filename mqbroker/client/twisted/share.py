"""The Twisted ``TwistedShareConsumer``: a share-group member inside a reactor (Deferred-returning).

The same pure core as the blocking ``ShareConsumer`` (``share_core``): heartbeats run on the
reactor's clock over their own connection to the group's host, ``poll`` fetches over another,
and verdicts queue up until the next ``poll`` or ``commit``. A poll cancelled while it waits for its
fetch leaves the fetch in flight: the next poll takes its answer (the records it leased, the outcomes
of the verdicts it carried), or reports those verdicts failed if it is lost.

    consumer = TwistedShareConsumer(reactor, "localhost:9393", group_id="billing", topics=["orders"])
    for message in await consumer.poll():
        consumer.ack(message)
    await consumer.commit(); await consumer.close()
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure

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
from mqbroker.client.twisted.cluster import TwistedCluster
from mqbroker.client.twisted.consumer import ignore_broker_error
from mqbroker.errors import BrokerError
from mqbroker.model import AcknowledgeType
from mqbroker.protocols.native.messages import CoordinatorType

HEARTBEATS = "share-heartbeat"
FETCHES = "share-fetch"

T = TypeVar("T")


class TwistedShareConsumer:
    """A member of a share group, reactor-driven."""

    log = Logger()

    def __init__(self, reactor: Any, bootstrap: str | Sequence[str] = "localhost:9393", *, group_id: str,
                 topics: Sequence[str], client_id: str = "mqbroker-share-consumer", records_max: int = 500,
                 fetch_wait_ms: int = 500, lease_ms: int | None = None, security: ClientSecurity | None = None,
                 on_acknowledged: AcknowledgedCallback | None = None) -> None:
        self._reactor = reactor
        self._cluster = TwistedCluster(reactor, bootstrap, client_id, security)
        self._membership = ShareMembership(group_id, topics)
        self._core = ShareConsumerCore(group_id, records_max=records_max, lease_ms=-1 if lease_ms is None else lease_ms,
                                       on_acknowledged=on_acknowledged)
        self._fetch_wait_ms = fetch_wait_ms
        #: The fetch of a poll cancelled while it waited (the verdicts it carries, its answer): the next poll takes it.
        self._fetch: tuple[list[AcknowledgeOutcome], Deferred[Any]] | None = None
        self._joined: list[Deferred[None]] = []
        self._timer: IDelayedCall | None = reactor.callLater(0, self._beat)
        self._closed = False
        self.error: BaseException | None = None

    async def _host(self, role: str, request: object) -> Any:
        return await self._cluster.coordinator_request(role, request, key_type=CoordinatorType.SHARE)

    # -- membership ------------------------------------------------------------------------------

    def _beat(self) -> None:
        self._timer = None
        Deferred.fromCoroutine(self._heartbeat())

    async def _heartbeat(self) -> None:
        delay_ms = self._membership.heartbeat_interval_ms
        try:
            response = await self._host(HEARTBEATS, self._membership.heartbeat_request())
            self._membership.heartbeat_completed(response)
            waiters, self._joined = self._joined, []
            for waiter in waiters:
                waiter.callback(None)
        except BrokerError as error:
            delay_ms = COORDINATOR_RETRY_MS
            if not self._failed(error, HEARTBEATS):
                return
        if not self._closed:
            self._timer = self._reactor.callLater(delay_ms / 1000, self._beat)

    def _failed(self, error: BrokerError, role: str) -> bool:
        """Reconnect or rejoin after ``error``; False (and the error kept for ``poll``) when nothing helps."""
        try:
            self._recover(error, role)
        except BrokerError as fatal:
            self.error = fatal
            waiters, self._joined = self._joined, []
            for waiter in waiters:
                waiter.errback(fatal)
            return False
        return True

    def _recover(self, error: BrokerError, role: str) -> None:
        """Reconnect or rejoin after ``error``; raises it when nothing helps."""
        if self._membership.failed(error) is Rejoin.FIND_COORDINATOR:
            self._cluster.drop_coordinator(role)
            if role == FETCHES and self._fetch is not None:  # a cancelled poll's fetch, lost with the connection
                (sent, answered), self._fetch = self._fetch, None
                answered.addErrback(ignore_broker_error)
                self._core.report(failed_outcomes(sent, error))
        if self._timer is not None and self._timer.active():
            self._timer.reset(0)  # rejoin now

    def _until_joined(self) -> Deferred[None]:
        if self.error is not None:
            raise self.error
        if self._membership.joined:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._joined.append(waiter)
        return waiter

    # -- fetching and settling -------------------------------------------------------------------

    def poll(self) -> Deferred[list[ShareMessage]]:
        """Records leased to this consumer (a long poll of ``fetch_wait_ms``); sends queued verdicts first."""
        return Deferred.fromCoroutine(self._poll())

    async def _poll(self) -> list[ShareMessage]:
        held = self._core.take_held()  # leased by a poll whose ``on_acknowledged`` raised
        if held:
            return held
        await self._until_joined()
        if await self._raise_failure():  # held back from the last poll, which had records to return
            return []
        if self._fetch is None:
            request, sent = self._core.fetch_request(self._membership.member_id, self._fetch_wait_ms)
            self._fetch = (sent, Deferred.fromCoroutine(self._host(FETCHES, request)))
        sent, answered = self._fetch
        try:
            response = await _shielded(answered)  # cancelled, the fetch stays in flight for the next poll
        except BrokerError as error:
            self._fetch = None
            self._core.report(failed_outcomes(sent, error))
            if not self._failed(error, FETCHES):
                raise
            await deferLater(self._reactor, COORDINATOR_RETRY_MS / 1000, lambda: None)
            return []
        self._fetch = None
        messages = self._core.hand_over(*self._core.fetch_completed(response, sent))
        if not messages:
            await self._raise_failure()
        return messages

    async def _raise_failure(self) -> bool:
        """Raise the error a fetch reply held for the application (a batch that does not decode: this poll's error,
        not the consumer's); from one that a retry fixes (the host moved), recover instead. Whether there was one."""
        try:
            self._core.raise_failure()
        except BrokerError as error:
            self._recover(error, FETCHES)  # raises what no retry can fix
            await deferLater(self._reactor, COORDINATOR_RETRY_MS / 1000, lambda: None)
            return True
        return False

    def ack(self, message: ShareMessage) -> None:
        """The record is processed: done (sent with the next poll or commit)."""
        self._core.acknowledge([message], AcknowledgeType.ACCEPT)

    def release(self, message: ShareMessage, error: str = "") -> None:
        """Give the record back: it is delivered again until its delivery limit."""
        self._core.acknowledge([message], AcknowledgeType.RELEASE, error)

    def reject(self, message: ShareMessage, error: str = "") -> None:
        """The record cannot be processed: it goes to the group's dead-letter topic."""
        self._core.acknowledge([message], AcknowledgeType.REJECT, error)

    def acknowledge(self, messages: Iterable[ShareMessage], kind: AcknowledgeType = AcknowledgeType.ACCEPT,
                    error: str = "") -> None:
        """One verdict for many records."""
        self._core.acknowledge(messages, kind, error)

    def commit(self) -> Deferred[list[AcknowledgeOutcome]]:
        """Send the queued verdicts now; fires with their outcomes."""
        request, sent = self._core.acknowledge_request(self._membership.member_id)
        if request is None:
            return succeed([])
        return Deferred.fromCoroutine(self._acknowledge(request, sent))

    def extend_lease(self, messages: Iterable[ShareMessage], lease_ms: int) -> Deferred[list[AcknowledgeOutcome]]:
        """Keep ``messages`` leased for ``lease_ms`` more; fires with the outcomes."""
        request, sent = self._core.renew_request(self._membership.member_id, messages, lease_ms)
        return Deferred.fromCoroutine(self._acknowledge(request, sent))

    async def _acknowledge(self, request: object, sent: list[AcknowledgeOutcome]) -> list[AcknowledgeOutcome]:
        try:
            outcomes = self._core.acknowledge_completed(await self._host(FETCHES, request), sent)
        except BrokerError as error:
            outcomes = failed_outcomes(sent, error)
            self._failed(error, FETCHES)
        self._core.report(outcomes)
        return outcomes

    def close(self, timeout: float | None = None) -> Deferred[None]:
        """Send the queued verdicts, leave the group (what this consumer holds is released), disconnect;
        after ``timeout`` seconds (None: no limit) what is left is abandoned and the connections closed."""
        closing = Deferred.fromCoroutine(self._close())
        if timeout is not None:
            closing.addTimeout(timeout, self._reactor, onTimeoutCancel=lambda result, timeout: None)
        return closing

    async def _close(self) -> None:
        try:
            if self._fetch is not None:  # a cancelled poll's: its verdicts' outcomes (its records go with the leave)
                (sent, answered), self._fetch = self._fetch, None
                try:
                    outcomes = self._core.fetch_completed(await answered, sent)[1]
                except BrokerError as error:
                    outcomes = failed_outcomes(sent, error)
                self._core.report(outcomes)
            if self._membership.joined:
                await self.commit()
        finally:  # also when close timed out part-way: stop heartbeating all the same
            self._closed = True
            if self._timer is not None and self._timer.active():
                self._timer.cancel()
        try:
            if self._membership.joined:
                await self._host(HEARTBEATS, self._membership.leave_request())
        except BrokerError:
            pass  # the session timeout removes this member instead
        finally:
            self._cluster.close()


def _shielded(answered: Deferred[T]) -> Deferred[T]:
    """A Deferred firing with ``answered``'s outcome; cancelling it leaves ``answered`` alone, holding its outcome
    for the next ``_shielded`` waiter (the one that is not cancelled takes it)."""
    waiter: Deferred[T] = Deferred()

    def forward(outcome: Any) -> Any:
        if waiter.called:  # cancelled
            return outcome
        if isinstance(outcome, Failure):
            waiter.errback(outcome)
        else:
            waiter.callback(outcome)
        return None

    answered.addBoth(forward)
    return waiter
