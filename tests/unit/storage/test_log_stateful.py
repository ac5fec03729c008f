"""A partition log driven by random operations (appends, reads, rolls, truncations, retention, compaction,
clean and unclean restarts) must always agree with a plain in-memory list of batches."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mqbroker.storage import cleaner
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.records import iter_batches, stamp
from tests.unit.storage.logtools import make_batch, read_all

CONFIG = LogConfig(
    segment_bytes=1500, index_interval_bytes=200, cleanup_policy="compact,delete", retention_bytes=3000, retention_ms=-1
)


class PartitionLogMachine(RuleBasedStateMachine):
    """Model: the list of stored batches (stamped bytes) and the log start offset."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="log-machine-")
        self.log = PartitionLog.open(self.directory, CONFIG, now_ms=0)
        self.batches: list[tuple[int, int, bytes]] = []  # (base offset, next offset, bytes)
        self.log_start = 0
        self.serial = 0

    @property
    def end_offset(self) -> int:
        return self.batches[-1][1] if self.batches else self.log.log_end_offset

    @rule(count=st.integers(1, 5), value_bytes=st.integers(0, 300))
    def append(self, count: int, value_bytes: int) -> None:
        self.serial += 1
        keys = [f"{self.serial}-{slot}".encode() for slot in range(count)]  # unique: compaction keeps all
        batch = bytearray(make_batch([bytes([self.serial % 256]) * value_bytes] * count, keys=keys))
        result = self.log.append(bytes(batch), now_ms=0)
        assert result.base_offset == self.log.log_end_offset - count
        stamp(batch, 0, result.base_offset, -1)
        self.batches.append((result.base_offset, result.base_offset + count, bytes(batch)))

    @precondition(lambda self: self.batches)
    @rule(data=st.data(), max_bytes=st.integers(1, 4000))
    def read(self, data: st.DataObject, max_bytes: int) -> None:
        offset = data.draw(st.integers(self.log_start, self.end_offset))
        got = self.log.read(offset, max_bytes).records
        expected = [b for base, end, b in self.batches if end > offset]
        stored = [bytes(got[p : p + h.size_bytes]) for p, h in iter_batches(got)]
        assert stored == expected[: len(stored)]
        assert bool(stored) == bool(expected)

    @rule()
    def roll(self) -> None:
        self.log.roll(now_ms=0)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.log_start, self.end_offset))
        self.log.truncate_to(offset)
        self.batches = [entry for entry in self.batches if entry[1] <= offset]
        # The batch holding ``offset`` goes too, so the end may fall below the start: the start follows it.
        self.log_start = min(self.log_start, self.log.log_end_offset)

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.log_start, self.end_offset))
        self.log_start = self.log.delete_records_before(offset)
        assert self.log_start == offset

    @rule()
    def retention(self) -> None:
        self.log.apply_retention(now_ms=0)
        assert self.log.log_start_offset >= self.log_start
        self.log_start = self.log.log_start_offset

    @rule()
    def compact(self) -> None:
        cleaner.clean(self.log, now_ms=10**6)

    @rule(clean=st.booleans())
    def restart(self, clean: bool) -> None:
        if clean:
            self.log.close()
        self.log = PartitionLog.open(
            self.directory, CONFIG, now_ms=0, clean_shutdown=clean, log_start_offset=self.log_start
        )

    @invariant()
    def agrees_with_the_model(self) -> None:
        visible = [b for base, end, b in self.batches if end > self.log_start]
        assert self.log.log_start_offset == self.log_start
        if self.batches:
            assert self.log.log_end_offset == self.batches[-1][1]
        stored = read_all(self.log, start=self.log_start)
        assert stored == visible

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.directory)


TestPartitionLogMachine = PartitionLogMachine.TestCase
TestPartitionLogMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
