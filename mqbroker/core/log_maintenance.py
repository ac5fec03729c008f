"""The upkeep of the partition logs held here: the timers' ISR checks, interval flushes, retention and producer
expiry, and the last flush at stop."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from mqbroker.config import BrokerConfig
from mqbroker.durability.flusher import Flusher
from mqbroker.replication.replica_manager import ReplicaManager
from mqbroker.storage.manager import LogManager


class LogMaintenance:
    """What the service's timers do to every partition log of ``logs`` (each call is one pass over them)."""

    def __init__(self, *, config: BrokerConfig, clock: IReactorTime, logs: LogManager, replicas: ReplicaManager,
                 flusher: Flusher) -> None:
        self._config = config
        self._clock = clock
        self._logs = logs
        self._replicas = replicas
        self._flusher = flusher

    def check_isr(self) -> None:
        """Propose ISR changes for led partitions: lagging followers out, caught-up ones in.

        Also lets each led log forget the finished transactions its high watermark passed (their
        markers are replicated), so that list stays short without any read_committed reader.
        """
        self._replicas.check_isr()
        for partition_log in self._logs.logs():
            if partition_log.has_unreplicated_markers():
                partition_log.last_stable_offset(self._replicas.high_watermark(partition_log))

    def flush_due_logs(self) -> None:
        """Schedule fsync for logs whose interval flush policy says it is time (``sync`` logs flush on append)."""
        now_ms = self._now_ms()
        for partition_log in self._logs.logs():
            if partition_log.config.flush_policy != "sync" and partition_log.needs_flush(now_ms):
                self._flusher.request_flush(partition_log)

    def apply_retention(self) -> None:
        """Delete whole segments past retention, for every partition, never at or above the high watermark."""
        now_ms = self._now_ms()
        for partition_log in self._logs.logs():
            partition_log.apply_retention(now_ms, max_offset=self._replicas.high_watermark(partition_log))

    def expire_producers(self) -> None:
        """Forget idempotent producers idle for producer_id_expiration_ms, in every partition."""
        now_ms = self._now_ms()
        for partition_log in self._logs.logs():
            partition_log.expire_producers(now_ms, self._config.producer_id_expiration_ms)

    def flush_all(self) -> Deferred[None]:
        """Schedule fsync for every log; fires once the last round is durable (at stop)."""
        for partition_log in self._logs.logs():
            self._flusher.request_flush(partition_log)
        return self._flusher.drain()

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)
