"""Group membership for the Twisted consumer: the pure ``GroupMember`` driven by the reactor's clock.

One coroutine asks the member for its next step (join, heartbeat or wait) and performs it on
the "membership" coordinator connection, sleeping on the injected clock in between. Changes are
queued in the member and applied by the consumer at its next ``poll`` (the cooperative
contract: the member rejoins only once every change is applied). Commits and committed-offset
lookups go over a second coordinator connection, so they never wait behind a parked join.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from twisted.internet.defer import Deferred, race
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from mqbroker.client.connection import BrokerUnavailableError
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
from mqbroker.errors import BrokerError
from mqbroker.protocols.native.messages import (
    JoinGroupResponse,
    MetadataResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)

#: The coordinator connection that joins, syncs, heartbeats and leaves.
MEMBERSHIP = "membership"
#: The coordinator connection for commits and committed-offset lookups.
COMMITS = "commits"
#: Pause before reconnecting to an unreachable coordinator.
RETRY_S = 0.2


class CoordinatorLinks(Protocol):
    """What the membership needs of the client's connections."""

    async def coordinator_request(self, role: str, request: object) -> Any:
        """Send ``request`` to the group coordinator over the connection named ``role``."""

    def drop_coordinator(self, role: str) -> None:
        """Close the ``role`` connection (its waiting requests fail with BrokerUnavailableError)."""

    async def all_topics(self) -> MetadataResponse:
        """Metadata of every topic."""


class TwistedGroupMembership:
    """Runs a ``GroupMember`` on the reactor; the consumer takes its changes at each poll."""

    log = Logger()

    def __init__(
        self, member: GroupMember, *, links: CoordinatorLinks, clock: IReactorTime, pattern: re.Pattern[str] | None = None
    ) -> None:
        self.member = member
        self._links = links
        self._clock = clock
        self._pattern = pattern
        self._next_pattern_refresh_ms = 0
        self._stopping = False
        self.error: BaseException | None = None
        self._sleeping: tuple[Deferred[None], IDelayedCall] | None = None
        self._change_waiters: list[Deferred[None]] = []
        self._running = Deferred.fromCoroutine(self._run())

    def _now_ms(self) -> int:
        return round(self._clock.seconds() * 1000)  # round: a fake clock sums float steps

    # -- the consumer's side -----------------------------------------------------------------

    def take_changes(self) -> list[AssignmentChange]:
        """Changes to apply now; call ``changes_applied`` once they are (revocations committed)."""
        if self.error is not None:
            raise self.error
        return self.member.take_changes()

    def changes_applied(self, count: int) -> None:
        """The consumer applied ``count`` changes: the member may rejoin at once."""
        self.member.changes_applied(count)
        self._wake()

    def wait_for_change(self, timeout_s: float) -> Deferred[Any]:
        """Fire when the member has a change (or failed), or after ``timeout_s``."""
        changed: Deferred[None] = Deferred()
        self._change_waiters.append(changed)
        return race([changed, deferLater(self._clock, timeout_s, lambda: None)])

    def commit(self, offsets: Mapping[TopicPartition, int]) -> Deferred[None]:
        """Commit ``offsets`` as the current generation; fails with the broker's refusal."""
        return Deferred.fromCoroutine(self._commit(self.member.commit_request(dict(offsets))))

    def committed(self, partitions: Iterable[TopicPartition]) -> Deferred[dict[TopicPartition, int | None]]:
        """Committed offsets of ``partitions`` (None where nothing is committed)."""
        return Deferred.fromCoroutine(self._committed(list(partitions)))

    def close(self, leave: bool = True) -> Deferred[None]:
        """Stop heartbeating; leave the group (not for static members); close the coordinator connections."""
        return Deferred.fromCoroutine(self._close(leave))

    def abandon(self) -> None:
        """Stop at once, without leaving: the loop ends and both coordinator connections close."""
        self._stopping = True
        self._wake()
        self._links.drop_coordinator(MEMBERSHIP)
        self._links.drop_coordinator(COMMITS)

    async def _commit(self, request: object) -> None:
        await self._commits_request(request, raise_for_commit)

    async def _committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        request = offset_fetch_request(self.member.settings.group_id, partitions)
        response = await self._commits_request(request, lambda response: None)
        assert isinstance(response, OffsetFetchResponse)
        return committed_offsets(response, partitions)

    async def _commits_request(self, request: object, check: Callable[[object], None]) -> Any:
        """Send on the commits connection; while the coordinator moves (or is unreachable), find it and retry."""
        deadline_ms = self._now_ms() + COORDINATOR_RETRY_MS
        while True:
            try:
                response = await self._links.coordinator_request(COMMITS, request)
                check(response)
                return response
            except BrokerError as error:
                if not (isinstance(error, BrokerUnavailableError) or retry_commit_request(error)):
                    raise
                self._links.drop_coordinator(COMMITS)
                if self._stopping or self._now_ms() + RETRY_S * 1000 >= deadline_ms:
                    raise
                await deferLater(self._clock, RETRY_S, lambda: None)

    async def _close(self, leave: bool) -> None:
        self._stopping = True
        self._wake()
        if self.member.state is MemberState.JOINING:
            self._links.drop_coordinator(MEMBERSHIP)  # fails the parked join
        await self._running
        request = self.member.leave_request() if leave else None
        try:
            if request is not None:
                await self._links.coordinator_request(MEMBERSHIP, request)
        except BrokerError as error:
            self.log.info("leaving group {group} failed ({error}); its session timeout removes the member",
                          group=self.member.settings.group_id, error=error)
        finally:
            self._links.drop_coordinator(MEMBERSHIP)
            self._links.drop_coordinator(COMMITS)

    # -- the membership loop -----------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while not self._stopping:
                await self._step()
        except BaseException as error:  # surfaced to the consumer by take_changes()
            self.error = error
        self._changed()

    async def _step(self) -> None:
        """One round: join, heartbeat or wait, as the member says."""
        try:
            await self._refresh_pattern()
            step, wait_ms = self.member.next_step(self._now_ms())
            if step is Step.WAIT:
                await self._sleep(wait_ms / 1000)
            elif step is Step.JOIN:
                await self._join()
            else:
                await self._links.coordinator_request(MEMBERSHIP, self.member.heartbeat_request(self._now_ms()))
        except BrokerUnavailableError:
            self._links.drop_coordinator(MEMBERSHIP)
            self._fail(BrokerUnavailableError("lost the group coordinator"))
            if not self._stopping:
                await self._sleep(RETRY_S)
        except BrokerError as error:
            self._fail(error)
            if coordinator_moved(error):
                self._links.drop_coordinator(MEMBERSHIP)  # the next step asks which broker coordinates the group now
                if not self._stopping:
                    await self._sleep(RETRY_S)

    async def _join(self) -> None:
        joined = await self._links.coordinator_request(MEMBERSHIP, self.member.join_request())
        assert isinstance(joined, JoinGroupResponse)
        synced = await self._links.coordinator_request(MEMBERSHIP, self.member.join_completed(joined))
        assert isinstance(synced, SyncGroupResponse)
        if self.member.sync_completed(synced, self._now_ms()):
            self._changed()

    def _fail(self, error: BrokerError) -> None:
        if self._stopping and isinstance(error, BrokerUnavailableError):
            return
        if self.member.failed(error):
            self._changed()

    async def _refresh_pattern(self) -> None:
        """A pattern subscription follows the topics that match it (internal topics excepted)."""
        if self._pattern is None or self._now_ms() < self._next_pattern_refresh_ms:
            return
        self._next_pattern_refresh_ms = self._now_ms() + PATTERN_REFRESH_MS
        self.member.subscribe(matching_topics(self._pattern, await self._links.all_topics()))

    # -- waking ------------------------------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        woken: Deferred[None] = Deferred()
        self._sleeping = (woken, self._clock.callLater(max(0.0, seconds), woken.callback, None))
        try:
            await woken
        finally:
            self._sleeping = None

    def _wake(self) -> None:
        """End the loop's sleep now (a change was applied, or close)."""
        if self._sleeping is not None:
            woken, timer = self._sleeping
            if timer.active():
                timer.cancel()
                woken.callback(None)

    def _changed(self) -> None:
        """Wake every poll waiting for a change."""
        waiters, self._change_waiters = self._change_waiters, []
        for waiter in waiters:
            if not waiter.called:  # race() cancels the waiters that lost to the timeout
                waiter.callback(None)
