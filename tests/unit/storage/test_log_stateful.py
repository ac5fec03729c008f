"""A partition log driven by random operations (appends, reads, rolls, truncations, retention, compaction,
compaction killed during its swap, clean and unclean restarts) must always agree with a plain in-memory model."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mqbroker.records.decoder import decode_records
from mqbroker.records.header import iter_batches, read_header, stamp
from mqbroker.storage import cleaner, fs
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog
from tests.unit.storage.logtools import make_batch, read_all

DELETE_RETENTION_MS = 1000
CONFIG = LogConfig(
    segment_bytes=1024,
    index_interval_bytes=200,
    cleanup_policy="compact,delete",
    retention_bytes=3000,
    retention_ms=-1,
    delete_retention_ms=DELETE_RETENTION_MS,
)
KEYS = [b"a", b"b", b"c", b"d", b"e"]

ModelRecord = tuple[int, bytes, bytes | None]  # offset, key, value


@dataclass(frozen=True, slots=True)
class ModelBatch:
    """A stored batch as the model sees it; ``data`` is its exact bytes until compaction rewrites it."""

    base_offset: int
    last_offset: int
    records: tuple[ModelRecord, ...]
    delete_horizon_ms: int | None
    data: bytes | None


class SimulatedCrash(BaseException):
    """Raised from `fs.replace` to stop a compaction pass the way a SIGKILL would."""


class PartitionLogMachine(RuleBasedStateMachine):
    """Model: the stored batches, the log start and end offsets and the clock."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="log-machine-")
        self.now_ms = 1_000
        self.log = PartitionLog.open(self.directory, CONFIG, now_ms=self.now_ms)
        self.batches: list[ModelBatch] = []
        self.log_start = 0
        self.log_end = 0
        self.serial = 0

    @rule(batches=st.lists(st.tuples(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4), st.integers(0, 15)),
                           min_size=1, max_size=4), value_bytes=st.integers(0, 200))
    def append(self, batches: list[tuple[list[bytes], int]], value_bytes: int) -> None:
        """Append a few batches, one call each; a set bit of the tombstone mask makes that record's value null."""
        for keys, tombstones in batches:
            self.append_one(keys, tombstones, value_bytes)

    def append_one(self, keys: list[bytes], tombstones: int, value_bytes: int) -> None:
        self.serial += 1
        values = [None if tombstones >> slot & 1 else bytes([self.serial % 256]) * value_bytes + b"%d" % slot
                  for slot in range(len(keys))]
        batch = bytearray(make_batch(values, timestamp_ms=self.now_ms, keys=keys))
        result = self.log.append(bytes(batch), now_ms=self.now_ms)
        assert result.base_offset == self.log_end
        stamp(batch, 0, result.base_offset, -1)
        records = tuple((result.base_offset + slot, key, value) for slot, (key, value) in enumerate(zip(keys, values)))
        self.batches.append(ModelBatch(result.base_offset, result.last_offset, records, None, bytes(batch)))
        self.log_end = result.last_offset + 1

    @rule(elapsed_ms=st.integers(0, 1500))
    def tick(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms

    @precondition(lambda self: self.batches)
    @rule(data=st.data(), max_bytes=st.integers(1, 4000))
    def read(self, data: st.DataObject, max_bytes: int) -> None:
        offset = data.draw(st.integers(self.log_start, self.log_end))
        got = self.log.read(offset, max_bytes).records
        expected = [batch for batch in self.batches if batch.last_offset >= offset]
        stored = [got[position : position + header.size_bytes] for position, header in iter_batches(got)]
        assert bool(stored) == bool(expected)
        for batch, model in zip(stored, expected):
            assert_matches(batch, model)

    @rule()
    def roll(self) -> None:
        self.log.roll(now_ms=self.now_ms)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.log_start, self.log_end))
        self.log.truncate_to(offset)
        self.batches = [batch for batch in self.batches if batch.last_offset < offset]
        # The end lands after the last kept batch, or at the base of a segment compaction emptied.
        kept_end = self.batches[-1].last_offset + 1 if self.batches else 0
        assert kept_end <= self.log.log_end_offset <= max(min(offset, self.log_end), kept_end)
        self.log_end = self.log.log_end_offset
        self.log_start = min(self.log_start, self.log_end)

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.log_start, self.log_end))
        self.log_start = self.log.delete_records_before(offset)
        assert self.log_start == offset

    @rule(bounded=st.booleans(), data=st.data())
    def retention(self, bounded: bool, data: st.DataObject) -> None:
        max_offset = data.draw(st.integers(self.log_start, self.log_end)) if bounded else None
        self.log.apply_retention(now_ms=self.now_ms, max_offset=max_offset)
        assert self.log.log_start_offset >= self.log_start
        if max_offset is not None:
            assert self.log.log_start_offset <= max(self.log_start, max_offset)
        self.log_start = self.log.log_start_offset

    @rule(force=st.booleans())
    def compact(self, force: bool) -> None:
        sealed_end = self.log.segment_bases()[-1]
        if cleaner.clean(self.log, now_ms=self.now_ms, force=force).ran:
            self.compact_model(sealed_end)

    @rule(crash_at=st.integers(1, 6))
    def compact_killed_during_the_swap(self, crash_at: int) -> None:
        """A pass dies at its n-th rename; after an unclean restart a second pass finishes the job."""
        sealed_end = self.log.segment_bases()[-1]
        real_replace, calls = fs.replace, []

        def crashing_replace(source: str, target: str) -> None:
            calls.append(source)
            if len(calls) == crash_at:
                raise SimulatedCrash(source)
            real_replace(source, target)

        fs.replace = crashing_replace
        try:
            cleaner.clean(self.log, now_ms=self.now_ms, force=True)
        except SimulatedCrash:
            pass  # the process "died": reopen without closing
        finally:
            fs.replace = real_replace
        self.log = PartitionLog.open(self.directory, CONFIG, now_ms=self.now_ms, log_start_offset=self.log_start)
        self.check_no_newest_value_lost(sealed_end)
        cleaner.clean(self.log, now_ms=self.now_ms, force=True)
        self.compact_model(sealed_end)

    @rule(clean=st.booleans())
    def restart(self, clean: bool) -> None:
        if clean:
            self.log.close()
        self.log = PartitionLog.open(
            self.directory, CONFIG, now_ms=self.now_ms, clean_shutdown=clean, log_start_offset=self.log_start
        )

    def compact_model(self, sealed_end: int) -> None:
        """Apply one pass to the model: the newest record per key below ``sealed_end``, horizons for tombstones."""
        newest = {key: offset for batch in self.batches if batch.base_offset < sealed_end
                  for offset, key, _ in batch.records}
        compacted = []
        for batch in self.batches:
            if batch.base_offset >= sealed_end:
                compacted.append(batch)
                continue
            kept = tuple(record for record in batch.records if self.survives(record, batch, newest))
            horizon_ms = batch.delete_horizon_ms
            if horizon_ms is None and any(value is None for _, _, value in kept):
                horizon_ms = self.now_ms + DELETE_RETENTION_MS
            if kept == batch.records and horizon_ms == batch.delete_horizon_ms:
                compacted.append(batch)
            elif kept:
                compacted.append(replace(batch, records=kept, delete_horizon_ms=horizon_ms, data=None))
        self.batches = compacted

    def survives(self, record: ModelRecord, batch: ModelBatch, newest: dict[bytes, int]) -> bool:
        offset, key, value = record
        if newest[key] > offset:
            return False
        return value is not None or batch.delete_horizon_ms is None or self.now_ms < batch.delete_horizon_ms

    def check_no_newest_value_lost(self, sealed_end: int) -> None:
        """After a crash mid-pass: every record is one the model holds, and every key's newest value is there
        (a newest tombstone may already be gone once its delete horizon passed)."""
        stored = {record.offset: (record.key, record.value)
                  for batch in read_all(self.log, start=self.log_start) for record in decode_records(batch)}
        held = {offset: (key, value) for batch in self.batches for offset, key, value in batch.records}
        assert all(held.get(offset) == stored[offset] for offset in stored)
        newest = {key: offset for offset, (key, _) in sorted(held.items()) if offset < sealed_end}
        assert all(offset in stored for offset in newest.values() if offset >= self.log_start and held[offset][1])

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert self.log.log_start_offset == self.log_start
        assert self.log.log_end_offset == self.log_end
        visible = [batch for batch in self.batches if batch.last_offset >= self.log_start]
        stored = read_all(self.log, start=self.log_start)
        assert len(stored) == len(visible)
        for batch, model in zip(stored, visible):
            assert_matches(batch, model)

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.directory)


def assert_matches(batch: bytes, model: ModelBatch) -> None:
    """The stored batch is the model's: its exact bytes if never rewritten, else its bounds, horizon and records."""
    if model.data is not None:
        assert batch == model.data
        return
    header = read_header(batch)
    assert (header.base_offset, header.last_offset, header.delete_horizon_ms) == (
        model.base_offset, model.last_offset, model.delete_horizon_ms,
    )
    assert tuple((record.offset, record.key, record.value) for record in decode_records(batch)) == model.records


TestPartitionLogMachine = PartitionLogMachine.TestCase
TestPartitionLogMachine.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
