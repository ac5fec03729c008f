"""A seeded workload on a log manager, and the checks a power loss must pass, for the storage power-loss tests.

``LogWorkload`` drives one ``LogManager`` the way a broker does (appends with leader epochs,
idempotent producers, flushes, rolls, checkpoints, retention, delete-records, follower
truncation, partitions created and deleted, clean restarts) and remembers, as a client would,
every batch it wrote and every batch a flush reported durable. After a simulated power loss
``check_recovered`` opens the data directory again and asserts the promises: recovery
succeeds, every batch reported durable is there byte for byte, nothing invalid or never
written is returned, the leader-epoch cache covers every batch, and a retried idempotent
batch is still recognised.
"""

from __future__ import annotations

import dataclasses
import random

from mqbroker.records.header import read_header, stamp
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.manager import LogManager
from tests.unit.storage.logtools import make_batch, read_all

CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=256, retention_bytes=6000)
PRODUCER_ID = 77
#: Fewer open segment files than the workload's segments: files are closed and reopened under the power cuts too.
SEGMENT_FILES_OPEN_MAX = 2


@dataclasses.dataclass
class PartitionHistory:
    """What the client side knows of one partition."""

    #: base offset -> every batch (as stored) ever written there; a lost truncation may bring an old one back.
    written: dict[int, set[bytes]] = dataclasses.field(default_factory=dict)
    #: base offset -> the batch a flush reported durable there (and nothing since removed it on purpose).
    durable: dict[int, bytes] = dataclasses.field(default_factory=dict)
    #: base offset -> (last offset, stored batch) appended since the last flush.
    unflushed: dict[int, tuple[int, bytes]] = dataclasses.field(default_factory=dict)
    #: (producer epoch, base sequence) -> the client's idempotent batch.
    idempotent: dict[tuple[int, int], bytes] = dataclasses.field(default_factory=dict)
    #: After a truncation or a power loss the producer cannot know what the log kept: it bumps its
    #: epoch and starts again at sequence 0 (KIP-360), as a real idempotent producer does.
    producer_epoch: int = 0
    next_sequence: int = 0
    leader_epoch: int = 0
    #: The log start the workload asked for: recovery may start lower (not checkpointed), never higher.
    requested_start: int = 0
    #: The highest log start ever asked for: batches below it may come back, but their producer state need not.
    deleted_below: int = 0


class LogWorkload:
    """Random broker-like operations on a log manager under a data directory."""

    def __init__(self, data_dir: str, chooser: random.Random) -> None:
        self.data_dir = data_dir
        self.chooser = chooser
        self.histories: dict[tuple[str, int], PartitionHistory] = {}
        self.deleted: set[tuple[str, int]] = set()
        #: The operations run so far, for the failure message.
        self.trace: list[str] = []
        self.now_ms = 1_000
        self.manager = self._open()

    def _open(self) -> LogManager:
        manager = LogManager(self.data_dir, CONFIG, segment_files_open_max=SEGMENT_FILES_OPEN_MAX)
        manager.open_all(self.now_ms, {})
        for key in manager.partitions():
            self.histories.setdefault(key, PartitionHistory())
        return manager

    def restart_after_power_loss(self) -> None:
        """Open the data directory again (recovery) and check what it holds."""
        self.manager = self._open()
        self.check_recovered()

    # ---- operations -------------------------------------------------------------------------

    def run(self, steps: int) -> None:
        """``steps`` random operations (a ``PowerCut`` may end them early)."""
        operations = [
            (self._append, 30), (self._append_idempotent, 10), (self._flush, 20), (self._roll, 4),
            (self._checkpoint, 6), (self._truncate, 3), (self._delete_records, 2), (self._retention, 3),
            (self._create_partition, 1), (self._delete_partition, 1), (self._clean_restart, 1),
            (self._new_leader_epoch, 2),
        ]
        functions, weights = zip(*operations)
        for _ in range(steps):
            self.now_ms += self.chooser.randint(0, 50)
            operation = self.chooser.choices(functions, weights)[0]
            self.trace.append(operation.__name__.lstrip("_"))
            operation()

    def _partition(self) -> tuple[tuple[str, int], PartitionLog, PartitionHistory]:
        if not self.manager.partitions():
            self._create_partition()  # a power loss took every partition not yet durable
        key = self.chooser.choice(sorted(self.manager.partitions()))
        return key, self.manager.get(*key), self.histories[key]

    def _create_partition(self) -> None:
        if len(self.manager.partitions()) >= 3:
            return
        key = ("topic", max([partition for _, partition in self.histories] + [-1]) + 1)
        self.histories[key] = PartitionHistory()
        self.manager.create(*key, now_ms=self.now_ms)

    def _delete_partition(self) -> None:
        if len(self.manager.partitions()) < 2:
            return
        key, _, _ = self._partition()
        self.deleted.add(key)
        self.manager.delete(*key)

    def _store(self, history: PartitionHistory, client_batch: bytes, base_offset: int) -> None:
        stored = bytearray(client_batch)
        stamp(stored, 0, base_offset, history.leader_epoch)
        history.written.setdefault(base_offset, set()).add(bytes(stored))
        history.unflushed[base_offset] = (read_header(stored).last_offset, bytes(stored))

    def _append(self) -> None:
        _, log, history = self._partition()
        count = self.chooser.randint(1, 4)
        values = [self.chooser.randbytes(self.chooser.randint(1, 120)) for _ in range(count)]
        client_batch = make_batch(values, timestamp_ms=self.now_ms)
        result = log.append(client_batch, self.now_ms, leader_epoch=history.leader_epoch)
        self._store(history, client_batch, result.base_offset)

    def _append_idempotent(self) -> None:
        _, log, history = self._partition()
        values = [b"idempotent-%d" % (history.next_sequence + slot) for slot in range(self.chooser.randint(1, 3))]
        client_batch = make_batch(
            values, timestamp_ms=self.now_ms, producer_id=PRODUCER_ID, producer_epoch=history.producer_epoch,
            base_sequence=history.next_sequence,
        )
        result = log.append(client_batch, self.now_ms, leader_epoch=history.leader_epoch)
        assert not result.duplicate
        history.idempotent[(history.producer_epoch, history.next_sequence)] = client_batch
        history.next_sequence += len(values)
        self._store(history, client_batch, result.base_offset)

    def _flush(self) -> None:
        _, log, history = self._partition()
        durable_end = log.flush()
        for base_offset, (last_offset, stored) in list(history.unflushed.items()):
            if last_offset < durable_end:
                history.durable[base_offset] = stored
                del history.unflushed[base_offset]

    def _roll(self) -> None:
        _, log, _ = self._partition()
        log.roll(self.now_ms)

    def _checkpoint(self) -> None:
        self.manager.checkpoint()

    def _new_leader_epoch(self) -> None:
        _, _, history = self._partition()
        history.leader_epoch += 1

    def _truncate(self) -> None:
        """A follower cut back to a common prefix with its new leader."""
        _, log, history = self._partition()
        if log.log_end_offset <= log.log_start_offset:
            return
        cut = self.chooser.randint(log.log_start_offset, log.log_end_offset)
        _forget_from(history, cut)  # before: a power cut may stop the truncation anywhere
        _restart_producer(history)
        log.truncate_to(cut)

    def _delete_records(self) -> None:
        _, log, history = self._partition()
        target = self.chooser.randint(log.log_start_offset, log.log_end_offset)
        before, history.requested_start = history.requested_start, max(history.requested_start, target)  # if cut short
        history.requested_start = max(before, log.delete_records_before(target))

    def _retention(self) -> None:
        _, log, history = self._partition()
        before, history.requested_start = history.requested_start, log.log_end_offset  # if cut short
        log.apply_retention(self.now_ms, max_offset=log.log_end_offset)
        history.requested_start = max(before, log.log_start_offset)

    def _clean_restart(self) -> None:
        self.manager.close()
        self.manager = self._open()
        self.check_recovered()

    # ---- checks -----------------------------------------------------------------------------

    def check_recovered(self) -> None:
        """The promises a log keeps through any power loss."""
        present = set(self.manager.partitions())
        created = {key for key, history in self.histories.items() if history.durable}
        missing = created - present - self.deleted
        assert not missing, f"partitions with durable batches vanished: {sorted(missing)}"
        for key in sorted(present):
            history = self.histories.setdefault(key, PartitionHistory())
            _check_partition(key, self.manager.get(*key), history)
            history.unflushed.clear()
        for key in self.deleted - present:
            self.histories.pop(key, None)


def _forget_from(history: PartitionHistory, cut: int) -> None:
    """The workload removes every batch whose last offset is ``cut`` or more: they are no longer promised."""
    history.durable = {base: stored for base, stored in history.durable.items() if read_header(stored).last_offset < cut}
    history.unflushed = {base: entry for base, entry in history.unflushed.items() if entry[0] < cut}


def _restart_producer(history: PartitionHistory) -> None:
    """The producer goes on with a new epoch from sequence 0."""
    history.producer_epoch += 1
    history.next_sequence = 0


def _check_partition(key: tuple[str, int], log: PartitionLog, history: PartitionHistory) -> None:
    name = f"{key[0]}-{key[1]}"
    history.deleted_below = max(history.deleted_below, history.requested_start)
    batches = read_all(log)  # every batch's framing and CRC checked on the way
    present = {read_header(batch).base_offset: batch for batch in batches}
    expected_offset = log.log_start_offset
    for slot, batch in enumerate(batches):
        header = read_header(batch)
        holds_start = slot == 0 and header.base_offset <= expected_offset <= header.last_offset
        assert holds_start or header.base_offset == expected_offset, f"{name}: a gap or overlap at {header.base_offset}"
        assert batch in history.written.get(header.base_offset, set()), f"{name}: a batch never written at {header.base_offset}"
        expected_offset = header.next_offset
    assert expected_offset == log.log_end_offset, f"{name}: the batches end at {expected_offset}, the log at {log.log_end_offset}"
    assert log.log_start_offset <= history.requested_start, (
        f"{name}: the log starts at {log.log_start_offset}, past the {history.requested_start} asked for"
    )
    for base_offset, stored in sorted(history.durable.items()):
        if base_offset >= log.log_start_offset:
            assert present.get(base_offset) == stored, f"{name}: the durable batch at {base_offset} was lost or changed"
    _check_epochs(name, log, batches)
    _check_producer(name, log, history, batches)
    # What survives is what the workload goes on from: forget batches the power loss took.
    history.durable = {base: stored for base, stored in history.durable.items() if base in present}
    _restart_producer(history)
    history.requested_start = log.log_start_offset


def _check_epochs(name: str, log: PartitionLog, batches: list[bytes]) -> None:
    """The leader-epoch cache knows the epoch of every batch, and nothing past the log end."""
    entries = log.epochs.entries
    assert all(entry.start_offset < log.log_end_offset for entry in entries), f"{name}: epochs past the log end {entries}"
    for batch in batches:
        header = read_header(batch)
        epoch, end_offset = log.epochs.end_offset_for(header.partition_leader_epoch, log.log_end_offset)
        assert epoch == header.partition_leader_epoch and end_offset > header.last_offset, (
            f"{name}: the batch at {header.base_offset} of epoch {header.partition_leader_epoch} is outside "
            f"its epoch in the cache {entries}"
        )


def _check_producer(name: str, log: PartitionLog, history: PartitionHistory, batches: list[bytes]) -> None:
    """A retry of the producer's last batch in the log is answered with its offsets, not written again.

    Not for a batch below the log start the workload asked for: delete-records and retention drop
    its producer's state, and a power loss before the next checkpoint may bring the batch back.
    """
    ours = [read_header(batch) for batch in batches if read_header(batch).producer_id == PRODUCER_ID]
    if not ours or ours[-1].last_offset < history.deleted_below:
        return
    last = ours[-1]
    retry = log.append(history.idempotent[(last.producer_epoch, last.base_sequence)], 0)
    assert retry.duplicate and retry.base_offset == last.base_offset, (
        f"{name}: a retry of the batch at {last.base_offset} was not recognised ({retry})"
    )

