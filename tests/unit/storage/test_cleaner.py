"""Compaction against a model: newest value per key kept at its offset, batch bounds and producers' latest
batches kept, tombstones expire after their delete horizon, the dirty ratio gates passes, crashes are safe."""

from __future__ import annotations

import os
import random

import pytest

from mqbroker.records.decoder import decode_records
from mqbroker.records.header import iter_batches, read_header
from mqbroker.storage import checkpoint, cleaner, fs
from mqbroker.storage.config import LogConfig
from tests.unit.storage.logtools import make_batch, open_log, read_all

RETENTION_MS = 1000
COMPACTED = LogConfig(
    segment_bytes=2048, index_interval_bytes=256, cleanup_policy="compact", delete_retention_ms=RETENTION_MS
)
NOW_MS = 6500

Model = dict[int, tuple[bytes, bytes | None, int]]


def keyed_log(directory, seed: int, batches: int = 60, config: LogConfig = COMPACTED):
    """A compacted log of random keyed writes; returns it and the model: offset -> (key, value, timestamp)."""
    chooser = random.Random(seed)
    log = open_log(directory, config)
    model: Model = {}
    for number in range(batches):
        count = chooser.randint(1, 4)
        keys = [f"key-{chooser.randrange(12)}".encode() for _ in range(count)]
        values = [None if chooser.random() < 0.15 else f"v{number}-{slot}".encode() for slot in range(count)]
        timestamp = number * 100
        result = log.append(make_batch(values, timestamp_ms=timestamp, keys=keys), now_ms=timestamp)
        for slot in range(count):
            model[result.base_offset + slot] = (keys[slot], values[slot], timestamp)
    return log, model


def records_of(log) -> dict[int, tuple[bytes | None, bytes | None]]:
    return {record.offset: (record.key, record.value) for batch in read_all(log) for record in decode_records(batch)}


def bounds_of(log) -> list[tuple[int, int]]:
    return [(header.base_offset, header.last_offset) for batch in read_all(log) for _, header in iter_batches(batch)]


def expected_after_clean(
    model: Model, clean_end: int, tombstones_expired: bool
) -> dict[int, tuple[bytes, bytes | None]]:
    """The model's view: below ``clean_end`` only each key's newest record survives; expired tombstones go."""
    newest = {key: offset for offset, (key, _, _) in sorted(model.items()) if offset < clean_end}
    expected = {}
    for offset, (key, value, _) in model.items():
        cleaned = offset < clean_end
        if cleaned and (newest[key] != offset or (value is None and tombstones_expired)):
            continue
        expected[offset] = (key, value)
    return expected


@pytest.mark.parametrize("seed", range(5))
def test_compaction_keeps_the_newest_record_per_key_at_its_offset(tmp_path, seed):
    log, model = keyed_log(tmp_path, seed)
    original_bounds = set(bounds_of(log))
    clean_end = log.segment_bases()[-1]
    result = cleaner.clean(log, NOW_MS, force=True)
    assert result.ran and result.records_removed > 0 and result.bytes_after < result.bytes_before
    assert records_of(log) == expected_after_clean(model, clean_end, tombstones_expired=False)
    assert set(bounds_of(log)) <= original_bounds  # batches keep their first and last offsets
    assert log.append(make_batch([b"x"], keys=[b"key-1"]), now_ms=NOW_MS).base_offset == max(model) + 1
    reopened = open_log(tmp_path, COMPACTED)
    assert records_of(reopened) == records_of(log)


def test_tombstones_are_dropped_once_the_delete_horizon_of_their_first_cleaning_passed(tmp_path):
    log, model = keyed_log(tmp_path, seed=11)
    for offset, key, value in [(log.log_end_offset, b"gone", None), (log.log_end_offset + 1, b"stays", b"v")]:
        log.append(make_batch([value], keys=[key], timestamp_ms=6000), now_ms=6000)
        model[offset] = (key, value, 6000)
    log.roll(now_ms=6000)
    clean_end = log.log_end_offset
    cleaner.clean(log, NOW_MS, force=True)
    stamped = [read_header(batch) for batch in read_all(log) if read_header(batch).base_offset < clean_end]
    with_tombstones = [h for h in stamped if h.delete_horizon_ms is not None]
    assert with_tombstones and all(h.delete_horizon_ms == NOW_MS + RETENTION_MS for h in with_tombstones)
    cleaner.clean(log, NOW_MS + RETENTION_MS - 1, force=True)
    assert records_of(log) == expected_after_clean(model, clean_end, tombstones_expired=False)
    cleaner.clean(log, NOW_MS + RETENTION_MS, force=True)
    assert records_of(log) == expected_after_clean(model, clean_end, tombstones_expired=True)


def test_a_rewritten_batch_keeps_its_last_offset_when_its_last_records_go(tmp_path):
    log = open_log(tmp_path, COMPACTED)
    log.append(make_batch([b"a1", b"keep", b"c1"], keys=[b"a", b"keep", b"c"]), now_ms=0)
    log.append(make_batch([b"a2", b"c2"], keys=[b"a", b"c"]), now_ms=0)
    log.roll(now_ms=0)
    cleaner.clean(log, NOW_MS, force=True)
    first = read_header(read_all(log)[0])
    assert (first.base_offset, first.last_offset, first.records_count) == (0, 2, 1)
    assert records_of(log) == {1: (b"keep", b"keep"), 3: (b"a", b"a2"), 4: (b"c", b"c2")}


def test_a_producers_latest_batch_survives_compaction_as_a_header(tmp_path):
    log = open_log(tmp_path, COMPACTED)
    producer = {"producer_id": 77, "producer_epoch": 0}
    log.append(make_batch([b"p0"], keys=[b"k"], base_sequence=0, **producer), now_ms=0)
    log.append(make_batch([b"p1", b"p2"], keys=[b"k", b"j"], base_sequence=1, **producer), now_ms=0)
    log.append(make_batch([b"new-k", b"new-j"], keys=[b"k", b"j"]), now_ms=0)
    log.roll(now_ms=0)
    cleaner.clean(log, NOW_MS, force=True)
    headers = [read_header(batch) for batch in read_all(log)]
    assert [(h.base_offset, h.last_offset, h.records_count, h.producer_id) for h in headers] == [
        (1, 2, 0, 77),  # the first producer batch went; its latest stays as a header
        (3, 4, 2, -1),
    ]
    assert headers[0].last_sequence == 2
    log.close()
    for snapshot in tmp_path.glob("*.snapshot"):
        snapshot.unlink()  # producer state must now come from the log's headers alone
    reopened = open_log(tmp_path, COMPACTED)
    retry = reopened.append(make_batch([b"p1", b"p2"], keys=[b"k", b"j"], base_sequence=1, **producer), now_ms=0)
    assert retry.duplicate and (retry.base_offset, retry.last_offset) == (1, 2)
    assert reopened.append(make_batch([b"p3"], keys=[b"k"], base_sequence=3, **producer), now_ms=0).base_offset == 5


def test_a_header_only_batch_goes_once_its_producer_wrote_again(tmp_path):
    log = open_log(tmp_path, COMPACTED)
    producer = {"producer_id": 77, "producer_epoch": 0}
    log.append(make_batch([b"p0"], keys=[b"k"], base_sequence=0, **producer), now_ms=0)
    log.append(make_batch([b"new-k"], keys=[b"k"]), now_ms=0)
    log.roll(now_ms=0)
    cleaner.clean(log, NOW_MS, force=True)
    assert read_header(read_all(log)[0]).records_count == 0
    log.append(make_batch([b"p1"], keys=[b"z"], base_sequence=1, **producer), now_ms=0)
    log.roll(now_ms=0)
    cleaner.clean(log, NOW_MS, force=True)
    assert bounds_of(log) == [(1, 1), (2, 2)]


def test_the_dirty_ratio_decides_when_a_pass_runs_and_the_checkpoint_records_the_clean_end(tmp_path):
    config = LogConfig.from_mapping({"min.cleanable.dirty.ratio": 0.5}, base=COMPACTED)
    log, model = keyed_log(tmp_path, seed=5, config=config)
    log.roll(now_ms=NOW_MS)
    assert cleaner.dirty_ratio(log, NOW_MS) == 1.0
    clean_end = log.log_end_offset
    assert cleaner.clean(log, NOW_MS).ran
    assert checkpoint.read_offset(str(tmp_path / checkpoint.CLEANER_CHECKPOINT)) == clean_end
    assert cleaner.dirty_ratio(log, NOW_MS) == 0.0
    assert not cleaner.clean(log, NOW_MS).ran  # nothing dirty
    log.append(make_batch([b"late"], keys=[b"key-1"]), now_ms=NOW_MS)
    log.roll(now_ms=NOW_MS)
    ratio = cleaner.dirty_ratio(log, NOW_MS)
    assert 0.0 < ratio < 0.5
    skipped = cleaner.clean(log, NOW_MS)
    assert not skipped.ran and skipped.dirty_ratio == ratio
    assert cleaner.clean(log, NOW_MS, force=True).records_removed == 1  # the older key-1 went
    log.close()
    reopened = open_log(tmp_path, config, clean_shutdown=True)
    assert cleaner.dirty_ratio(reopened, NOW_MS) == 0.0


def test_a_truncation_below_the_clean_end_makes_the_new_records_dirty(tmp_path):
    log, model = keyed_log(tmp_path, seed=6)
    cleaner.clean(log, NOW_MS, force=True)
    bases = log.segment_bases()
    log.truncate_to(bases[1] + 1)
    assert checkpoint.read_offset(str(tmp_path / checkpoint.CLEANER_CHECKPOINT)) == log.log_end_offset
    log.append(make_batch([b"after"], keys=[b"key-2"]), now_ms=NOW_MS)
    log.roll(now_ms=NOW_MS)
    assert cleaner.dirty_ratio(log, NOW_MS) > 0.0


def test_a_damaged_cleaner_checkpoint_makes_the_whole_log_dirty(tmp_path):
    log, _ = keyed_log(tmp_path, seed=7)
    cleaner.clean(log, NOW_MS, force=True)
    log.close()
    (tmp_path / checkpoint.CLEANER_CHECKPOINT).write_bytes(b"\xff garbage")
    reopened = open_log(tmp_path, COMPACTED, clean_shutdown=True)
    assert cleaner.dirty_ratio(reopened, NOW_MS) == 1.0


def test_cleaning_twice_changes_nothing_more(tmp_path):
    log, model = keyed_log(tmp_path, seed=9)
    cleaner.clean(log, NOW_MS, force=True)
    after_first = records_of(log)
    files = {name: os.path.getmtime(tmp_path / name) for name in os.listdir(tmp_path) if name.endswith(".log")}
    again = cleaner.clean(log, NOW_MS, force=True)
    assert again.records_removed == 0 and again.segments_rewritten == 0
    assert records_of(log) == after_first
    assert files == {name: os.path.getmtime(tmp_path / name) for name in files}


def test_delete_policy_logs_are_not_compacted(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=2048))
    for _ in range(40):
        log.append(make_batch([b"v"], keys=[b"same"]), now_ms=0)
    assert not cleaner.clean(log, 10**9, force=True).ran


def test_min_compaction_lag_protects_recent_segments(tmp_path):
    log, model = keyed_log(tmp_path, seed=3)
    lagged = LogConfig.from_mapping({"min.compaction.lag.ms": 10**9}, base=COMPACTED)
    log.reconfigure(lagged)
    assert cleaner.clean(log, NOW_MS, force=True).records_removed == 0


@pytest.mark.parametrize("crash_at_replace", [1, 2, 3, 4])
def test_a_crash_during_the_swap_leaves_a_readable_log_with_every_newest_value(tmp_path, monkeypatch, crash_at_replace):
    log, model = keyed_log(tmp_path, seed=crash_at_replace)
    expected = expected_after_clean(model, log.segment_bases()[-1], tombstones_expired=False)
    original = records_of(log)
    calls = []
    real_replace = fs.replace

    def crashing_replace(source: str, target: str) -> None:
        calls.append(source)
        if len(calls) == crash_at_replace:
            raise SystemExit("simulated crash")
        real_replace(source, target)

    monkeypatch.setattr(fs, "replace", crashing_replace)
    with pytest.raises(SystemExit):
        cleaner.clean(log, NOW_MS, force=True)
    monkeypatch.setattr(fs, "replace", real_replace)
    recovered = records_of(open_log(tmp_path, COMPACTED))
    assert set(expected) <= set(recovered) <= set(original)
    assert all(recovered[offset] == original[offset] for offset in recovered)


def test_a_compacted_segment_that_becomes_active_again_closes_cleanly(tmp_path):
    log = open_log(tmp_path, COMPACTED)
    log.append(make_batch([b"old", b"new"], keys=[b"a", b"a"]), now_ms=0)
    log.roll(now_ms=0)
    cleaner.clean(log, NOW_MS, force=True)
    log.truncate_to(1)  # the compacted segment is the active one again; its indexes are rebuilt
    log.append(make_batch([b"after"], keys=[b"a"]), now_ms=0)
    log.close()
    assert records_of(open_log(tmp_path, COMPACTED, clean_shutdown=True)) == {0: (b"a", b"after")}
