"""LogManager: the data directory's partition logs, their checkpoints and the clean-shutdown marker.

Layout::

    <data_dir>/<topic>-<partition>/          one PartitionLog per partition
    <data_dir>/recovery-point-offset-checkpoint   below these offsets every log (and its epoch cache) is fsynced
    <data_dir>/log-start-offset-checkpoint        where each log starts (delete_records_before)
    <data_dir>/.clean-shutdown                    present only after a clean `close()`

With the marker present `open_all` skips recovery; each segment's indexes are then read
only when first used, so a broker with many partitions starts quickly. The logs share one
bounded set of open segment files (`segment_files`), so the broker's descriptors do not grow
with its partitions. Work on many logs at once (opening, creating and closing them) goes
through ``parallel_map``: the broker passes a thread pool's, so
the fsyncs of many partitions overlap (the disk commits them together) instead of queueing.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from mqbroker.storage import checkpoint, fs
from mqbroker.storage.config import LogConfig
from mqbroker.storage.errors import InvalidConfigError, PartitionExistsError, UnknownPartitionError
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.segment_files import OPEN_MAX_DEFAULT, SegmentFiles

RECOVERY_POINTS = "recovery-point-offset-checkpoint"
LOG_START_OFFSETS = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN = ".clean-shutdown"
DELETING_SUFFIX = ".deleting"
_PARTITION_DIRECTORY = re.compile(r"(?P<topic>[A-Za-z0-9._-]+)-(?P<partition>[0-9]+)")  # whole names (fullmatch)
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")

TopicPartition = tuple[str, int]
#: ``map``'s shape: a function and its arguments in, the results in order out.
ParallelMap = Callable[[Callable[..., Any], Iterable[Any]], Iterator[Any]]


class LogManager:
    """Creates, opens, checkpoints and deletes the partition logs under one data directory."""

    def __init__(
        self,
        data_dir: str,
        default_config: LogConfig,
        segment_files_open_max: int = OPEN_MAX_DEFAULT,
        parallel_map: ParallelMap = map,
    ) -> None:
        """``parallel_map`` runs per-log work of many logs (default: one after another, ``map``)."""
        self.data_dir = data_dir
        self.default_config = default_config
        self._map = parallel_map
        #: The open `.log` files of every segment here, at most ``segment_files_open_max`` unpinned ones.
        self.segment_files = SegmentFiles(segment_files_open_max)
        self._logs: dict[TopicPartition, PartitionLog] = {}
        #: Serializes checkpoint writers: the housekeeping thread, and deletes and close on the reactor thread.
        self._checkpoint_lock = threading.Lock()

    def open_all(self, now_ms: int, topic_configs: Mapping[str, LogConfig] | None = None) -> None:
        """Open every partition found on disk, recovering them unless the last stop was clean."""
        fs.makedirs(self.data_dir)
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN)
        clean = os.path.exists(marker)
        if clean:
            fs.unlink(marker)  # from now on a crash must be treated as unclean
            fs.fsync_path(self.data_dir)
        recovery_points = checkpoint.read_offsets(os.path.join(self.data_dir, RECOVERY_POINTS))
        log_starts = checkpoint.read_offsets(os.path.join(self.data_dir, LOG_START_OFFSETS))
        configs = topic_configs or {}
        found: list[tuple[TopicPartition, str]] = []
        for name in sorted(os.listdir(self.data_dir)):
            path = os.path.join(self.data_dir, name)
            if name.endswith(DELETING_SUFFIX):
                fs.remove_tree(path)
                continue
            match = _PARTITION_DIRECTORY.fullmatch(name)
            if match is not None and os.path.isdir(path):
                found.append(((match["topic"], int(match["partition"])), path))

        def open_one(key: TopicPartition, path: str) -> PartitionLog:
            return PartitionLog.open(
                path,
                configs.get(key[0], self.default_config),
                now_ms,
                recovery_point=recovery_points.get(key, 0),
                log_start_offset=log_starts.get(key, 0),
                clean_shutdown=clean,
                files=self.segment_files,
            )

        opened = self._map(open_one, *zip(*found)) if found else iter(())
        self._logs.update(zip((key for key, _ in found), opened))

    def _run_all(self, function: Callable[..., Any], *arguments: Iterable[Any]) -> None:
        """Call ``function`` on every set of ``arguments`` through ``parallel_map``; the first error is raised."""
        for _ in self._map(function, *arguments):
            pass

    def create(self, topic: str, partition: int, config: LogConfig | None = None, now_ms: int = 0) -> PartitionLog:
        """Create an empty partition log (its directory made durable before it is returned)."""
        return self.create_many(topic, [partition], config, now_ms)[0]

    def create_many(
        self, topic: str, partitions: Iterable[int], config: LogConfig | None = None, now_ms: int = 0
    ) -> list[PartitionLog]:
        """Create empty logs for ``partitions`` of ``topic`` at once (durable, directories and all, on return)."""
        keys = [(topic, partition) for partition in partitions]
        for key in keys:
            if not _TOPIC_NAME.fullmatch(topic) or key[1] < 0:
                raise InvalidConfigError(f"topic {topic!r} partition {key[1]} cannot name a log directory")
            if key in self._logs:
                raise PartitionExistsError(f"partition {topic}-{key[1]} already exists")
        if len(set(keys)) != len(keys):
            raise PartitionExistsError(f"partitions {sorted(keys)} of topic {topic!r} name one partition twice")
        log_config = config or self.default_config

        def create_one(key: TopicPartition) -> PartitionLog:
            return PartitionLog.open(self._directory(key), log_config, now_ms, files=self.segment_files)

        logs = list(self._map(create_one, keys))
        fs.fsync_path(self.data_dir)
        self._logs.update(zip(keys, logs))
        return logs

    def get(self, topic: str, partition: int) -> PartitionLog:
        """The open log of a partition; ``UnknownPartitionError`` if there is none."""
        try:
            return self._logs[(topic, partition)]
        except KeyError:
            raise UnknownPartitionError(f"partition {topic}-{partition} is not stored on this broker") from None

    def logs(self) -> list[PartitionLog]:
        """Every open partition log, in no particular order (housekeeping visits 10,000s every 50 ms: no sort)."""
        return list(self._logs.values())

    def partitions(self) -> list[TopicPartition]:
        """Every (topic, partition) held, sorted."""
        return sorted(self._logs)

    def holds(self, topic: str, partition: int) -> bool:
        """Whether a log of the partition is held here (without sorting them all, as `partitions` does)."""
        return (topic, partition) in self._logs

    def delete(self, topic: str, partition: int) -> None:
        """Close a partition and remove its directory (renamed first, so a crash cannot half-delete it)."""
        log = self.get(topic, partition)
        with self._checkpoint_lock:  # a checkpoint running in a thread may be writing this log's snapshot
            del self._logs[(topic, partition)]
            log.close()
            doomed = self._directory((topic, partition)) + DELETING_SUFFIX
            if os.path.exists(doomed):
                fs.remove_tree(doomed)
            fs.replace(self._directory((topic, partition)), doomed)
            fs.remove_tree(doomed)
            self._write_offsets()

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` in every partition; return how many (called on a timer)."""
        return sum(log.expire_producers(now_ms, expiration_ms) for log in self._logs.values())

    def checkpoint(self) -> None:
        """Persist leader-epoch caches, recovery points, log start offsets and producer snapshots atomically.

        Safe to call from a thread other than the one creating and deleting logs (it fsyncs, so
        the broker runs it in its thread pool).
        """
        with self._checkpoint_lock:
            self._run_all(_persist_state, list(self._logs.values()))
            self._write_offsets()

    def _write_offsets(self) -> None:
        logs = list(self._logs.items())
        checkpoint.write_offsets(
            os.path.join(self.data_dir, RECOVERY_POINTS), {key: log.recovery_point for key, log in logs}
        )
        checkpoint.write_offsets(
            os.path.join(self.data_dir, LOG_START_OFFSETS), {key: log.log_start_offset for key, log in logs}
        )

    def close(self) -> None:
        """Close every log, checkpoint, and leave the clean-shutdown marker."""
        with self._checkpoint_lock:
            self._run_all(PartitionLog.close, list(self._logs.values()))  # each log's fsyncs beside the others'
            self._write_offsets()
            checkpoint.write_atomically(os.path.join(self.data_dir, CLEAN_SHUTDOWN), b"")
            self._logs.clear()

    def _directory(self, key: TopicPartition) -> str:
        return os.path.join(self.data_dir, f"{key[0]}-{key[1]}")


def _persist_state(partition_log: PartitionLog) -> None:
    """A checkpoint's work on one log: its producer snapshot and its epoch cache (before its recovery point moves)."""
    partition_log.snapshot_producers()
    partition_log.persist_epochs()
