"""``x-overflow`` reject-publish and reject-publish-dlx on a share queue: publishes judged in rounds before they are
appended (``publish_admission.py`` says how and why).

The publishes that reach this broker for the queue wait in one ``AdmittedBatch``; a round asks the queue's ready
count (the share group's host and the log's leader answer, wherever they are), appends the oldest that fit as one
batch, and rejects the rest: nacked to a confirming publisher, dropped otherwise, and with reject-publish-dlx
dead-lettered (reason ``maxlen``) through the queue's dead-letter exchange. Nothing is appended that was not
admitted, so a confirm always means the message is in the queue's log; a rejected one never reaches it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.logger import Logger

from mqbroker import errors, limits
from mqbroker.protocols.amqp.appender import AdmittedBatch, Appender, BatchStored
from mqbroker.protocols.amqp.codec import decode_properties
from mqbroker.protocols.amqp.publish_admission import AdmissionLedger, rejected_here_before
from mqbroker.protocols.amqp.queue_arguments import DeathReason, Overflow, QueuePolicy, parse_expiration
from mqbroker.protocols.amqp.queue_state import QueuedMessage
from mqbroker.protocols.amqp.queues import QueueHost
from mqbroker.protocols.amqp.share_arguments import delay_header
from mqbroker.protocols.amqp.spec import AmqpError
from mqbroker.protocols.amqp.stored import StoredMessage

#: One waiting publish: timestamp (ms), exchange, routing key, raw properties, body, expiration.
_Publish = tuple[int, str, str, bytes, bytes, "str | None"]


class PublishGate:
    """Judges one share queue's publishes at this broker against its ``x-max-length``."""

    log = Logger()

    def __init__(self, host: QueueHost, queue: str, policy: QueuePolicy, appender: Appender,
                 count_ready: Callable[[], Awaitable[int]]) -> None:
        """``count_ready()`` asks the queue's ready messages (the group's available records and the unread log)."""
        assert policy.max_length is not None and policy.overflow.rejects_publish
        self._host = host
        self._queue = queue
        self._policy = policy
        self._appender = appender
        self._count_ready = count_ready
        self._ledger = AdmissionLedger(policy.max_length)
        self._round: AdmittedBatch | None = None
        self._waiting: list[_Publish] = []
        self._abandoned = False

    def append(self, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes, body: bytes,
               expiration: str | None) -> BatchStored:
        """A publish waits for the next round's verdict (the batch it joins says it)."""
        if self._round is None:
            self._round = AdmittedBatch()
            self._host.reactor.callLater(0, self._start_round_if_due)  # once this turn's publishes joined it
        self._waiting.append((timestamp_ms, exchange, routing_key, properties_raw, body, expiration))
        self._round.size += 1
        return self._round

    async def drained(self) -> None:
        """Every publish so far is judged and, if admitted, in the log (or refused); later rounds are not waited for
        (a publisher that never stops would keep a get or a count waiting)."""
        if self._round is not None:
            judged: Deferred[None] = Deferred()
            self._round.when_settled(lambda _: judged.callback(None))
            await judged
        await self._appender.drained()

    def abandon(self) -> None:
        """The queue is gone: what waits is rejected (nacked; not dead-lettered)."""
        self._abandoned = True
        if self._round is not None and not self._ledger.asking:
            self._decide(0, dead_letter=False)

    def _start_round_if_due(self) -> None:
        if self._abandoned or not self._ledger.round_due(len(self._waiting)):
            return
        self._ledger.start_round()
        counted = Deferred.fromCoroutine(self._count())
        counted.addErrback(self._count_failed)
        counted.addCallback(self._counted)
        counted.addErrback(lambda failure: self.log.failure("judging publishes to {queue} failed", failure,
                                                            queue=self._queue))

    async def _count(self) -> int | None:
        """The queue's ready count, asked again through a failover of its group's host or its log's leader for up
        to ``limits.reroute_ms_max`` (None after that: the round's publishes are rejected)."""
        started_ms = self._host.now_ms()
        while True:
            try:
                return await self._count_ready()
            except errors.BrokerError as error:
                if self._abandoned or self._host.now_ms() - started_ms >= limits.reroute_ms_max:
                    self.log.warn("AMQP share queue {queue}: its ready count is not known ({error}); {count} "
                                  "publishes rejected", queue=self._queue, error=error, count=len(self._waiting))
                    return None
            await deferLater(self._host.reactor, limits.amqp_admission_retry_ms / 1000, lambda: None)

    def _count_failed(self, failure: Any) -> None:
        """Not a broker error (a lost connection to a peer, say): the round's publishes are rejected all the same."""
        self.log.failure("counting AMQP share queue {queue} failed; its waiting publishes are rejected", failure,
                         queue=self._queue)

    def _counted(self, ready: int | None) -> None:
        if ready is None or self._abandoned:
            self._ledger.round_failed()
            self._decide(0, dead_letter=False)
        else:
            self._decide(self._ledger.decide(len(self._waiting), ready), dead_letter=True)
        self._start_round_if_due()

    def _decide(self, admitted: int, *, dead_letter: bool) -> None:
        """Append the first ``admitted`` waiting publishes as one batch, reject the rest; the round settles once the
        batch is stored."""
        assert self._round is not None
        judged, waiting = self._round, self._waiting
        self._round, self._waiting = None, []
        judged.admitted = admitted
        if admitted:
            batch = None
            for timestamp_ms, exchange, routing_key, properties_raw, body, expiration in waiting[:admitted]:
                batch = self._appender.append(timestamp_ms, exchange, routing_key, properties_raw, body, expiration,
                                              extra_headers=delay_header(properties_raw))
            assert batch is not None
            batch.when_settled(lambda _: self._landed(admitted))
            batch.when_settled(judged.settle)
        else:
            judged.settle(True)
        if dead_letter and self._policy.overflow is Overflow.REJECT_PUBLISH_DLX:
            for publish in waiting[admitted:]:
                self._dead_letter(publish)

    def _landed(self, admitted: int) -> None:
        self._ledger.landed(admitted)
        self._start_round_if_due()

    def _dead_letter(self, publish: _Publish) -> None:
        """reject-publish-dlx: a rejected publish goes through the dead-letter exchange with ``x-death`` (maxlen),
        unless it already died so here (at most once: its publisher was nacked and may send it again)."""
        timestamp_ms, exchange, routing_key, properties_raw, body, expiration = publish
        try:
            headers: Any = decode_properties(properties_raw).headers
        except AmqpError:
            headers = None
        if rejected_here_before(headers, self._queue):
            return
        message = QueuedMessage(offset=-1, timestamp_ms=timestamp_ms, expiration_ms=parse_expiration(expiration),
                                payload=StoredMessage(exchange=exchange, routing_key=routing_key,
                                                      properties_raw=properties_raw, body=body))
        self._host.republish_dead(self._queue, self._policy, message, DeathReason.MAXLEN)
