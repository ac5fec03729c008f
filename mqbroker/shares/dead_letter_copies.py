"""A share group's dead letters copied to its ``dead.letter.topic`` (acks=all) before they count as done, retried
until they land; without a topic they are dropped (and counted). Also the topic's depth, for ``describe``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, gatherResults, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker.shares.data import ShareData
from mqbroker.shares.dead_letters import dead_letter_batch
from mqbroker.shares.group import HostedGroup
from mqbroker.shares.partition_values import AcquiredRange, DeadLetter
from mqbroker.shares.runtime import HostedPartition

#: Pause before a dead-letter copy that failed is tried again.
DEAD_LETTER_RETRY_S = 1.0


class DeadLetterCopies:
    """Copies the dead letters of the hosted share partitions to their groups' dead-letter topics."""

    log = Logger()

    def __init__(self, *, clock: IReactorTime, data: ShareData, settle: Callable[[HostedGroup, HostedPartition], Any],
                 stopped: Callable[[], bool]) -> None:
        """``settle(group, hosted)`` after a copy landed; ``stopped()`` says the hosting ended."""
        self._clock = clock
        self._data = data
        self._settle = settle
        self._stopped = stopped

    def copy(self, group: HostedGroup, hosted: HostedPartition, dead: DeadLetter) -> Deferred[None]:
        """Copy dead letters to the group's topic (acks=all), then mark them done; without a topic, drop them."""
        topic = group.settings.dead_letter_topic
        batch = None
        if topic:
            batch = dead_letter_batch(hosted.cache.covering([AcquiredRange(dead.first, dead.last, 0)]), dead,
                                      group_id=group.group_id, topic=hosted.topic, partition=hosted.partition)
        if batch is None:
            self._done(group, hosted, dead)
            return succeed(None)
        count = self._data.partition_count(topic)
        copied = self._data.append(topic, hosted.partition % count if count else 0, batch)
        done: Deferred[None] = Deferred()

        def landed(_: Any) -> None:
            self._done(group, hosted, dead)
            done.callback(None)

        def retry(failure: Failure) -> None:
            if self._stopped() or group.deleted:
                done.errback(failure)
                return
            self.log.warn("share group {group}: copying {first}..{last} to dead-letter topic {topic} failed ({error}); "
                          "retrying in {delay} s", group=group.group_id, first=dead.first, last=dead.last, topic=topic,
                          error=failure.getErrorMessage(), delay=DEAD_LETTER_RETRY_S)
            self._clock.callLater(DEAD_LETTER_RETRY_S, lambda: self.copy(group, hosted, dead).chainDeferred(done))

        copied.addCallbacks(landed, retry)
        return done

    def _done(self, group: HostedGroup, hosted: HostedPartition, dead: DeadLetter) -> None:
        if self._stopped() or group.deleted:
            return
        hosted.state.dead_lettered(dead.first, dead.last)
        group.dead_lettered += dead.last - dead.first + 1
        self._settle(group, hosted)

    def depth(self, topic: str) -> Deferred[int]:
        """Records on the dead-letter topic (-1: none configured, or its offsets could not be read)."""
        count = self._data.partition_count(topic) if topic else 0
        if not count:
            return succeed(-1 if not topic else 0)
        ends = [self._data.log_offset(topic, partition, earliest) for partition in range(count)
                for earliest in (True, False)]
        depth = gatherResults(ends, consumeErrors=True)
        depth.addCallback(lambda offsets: sum(offsets[index + 1] - offsets[index] for index in range(0, len(offsets), 2)))
        return depth.addErrback(lambda _: -1)
