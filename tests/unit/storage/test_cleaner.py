"""Compaction against a model: newest value per key kept at its offset, tombstones expire, crashes are safe."""

from __future__ import annotations

import random

import pytest

from mqbroker.storage import cleaner, fs
from mqbroker.storage.config import LogConfig
from mqbroker.storage.records import decode_records
from tests.unit.storage.logtools import make_batch, open_log, read_all

COMPACTED = LogConfig(segment_bytes=2048, index_interval_bytes=256, cleanup_policy="compact", delete_retention_ms=1000)


def keyed_log(directory, seed: int, batches: int = 60):
    """A compacted log of random keyed writes; returns it and the model: offset -> (key, value, timestamp)."""
    chooser = random.Random(seed)
    log = open_log(directory, COMPACTED)
    model: dict[int, tuple[bytes, bytes | None, int]] = {}
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


def expected_after_clean(log, model, now_ms: int) -> dict[int, tuple[bytes | None, bytes | None]]:
    """The model's view: in sealed segments only each key's newest record survives, tombstones expire."""
    active_base = log.segment_bases()[-1]
    newest = {key: offset for offset, (key, _, _) in sorted(model.items()) if offset < active_base}
    expected = {}
    for offset, (key, value, timestamp) in model.items():
        sealed = offset < active_base
        if sealed and newest[key] != offset:
            continue
        if sealed and value is None and timestamp < now_ms - COMPACTED.delete_retention_ms:
            continue
        expected[offset] = (key, value)
    return expected


@pytest.mark.parametrize("seed", range(5))
def test_compaction_keeps_the_newest_record_per_key_at_its_offset(tmp_path, seed):
    log, model = keyed_log(tmp_path, seed)
    now_ms = 6500
    result = cleaner.clean(log, now_ms)
    assert result.records_removed > 0 and result.bytes_after < result.bytes_before
    assert records_of(log) == expected_after_clean(log, model, now_ms)
    offsets = list(records_of(log))
    assert offsets == sorted(offsets)
    assert log.append(make_batch([b"x"], keys=[b"key-1"]), now_ms=now_ms).base_offset == max(model) + 1
    reopened = open_log(tmp_path, COMPACTED)
    assert records_of(reopened) == records_of(log)


def test_cleaning_twice_changes_nothing_more(tmp_path):
    log, model = keyed_log(tmp_path, seed=9)
    cleaner.clean(log, 6500)
    after_first = records_of(log)
    assert cleaner.clean(log, 6500).records_removed == 0
    assert records_of(log) == after_first


def test_delete_policy_logs_are_not_compacted(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=2048))
    for number in range(40):
        log.append(make_batch([b"v"], keys=[b"same"]), now_ms=0)
    assert cleaner.clean(log, 10**9).records_removed == 0


def test_min_compaction_lag_protects_recent_segments(tmp_path):
    log, model = keyed_log(tmp_path, seed=3)
    lagged = LogConfig.from_mapping({"min.compaction.lag.ms": 10**9}, base=COMPACTED)
    log.reconfigure(lagged)
    assert cleaner.clean(log, 6500).records_removed == 0


@pytest.mark.parametrize("crash_at_replace", [1, 2, 3, 4])
def test_a_crash_during_the_swap_leaves_a_readable_log_with_every_newest_value(tmp_path, monkeypatch, crash_at_replace):
    log, model = keyed_log(tmp_path, seed=crash_at_replace)
    now_ms = 6500
    expected = expected_after_clean(log, model, now_ms)
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
        cleaner.clean(log, now_ms)
    monkeypatch.setattr(fs, "replace", real_replace)
    recovered = records_of(open_log(tmp_path, COMPACTED))
    assert set(expected) <= set(recovered) <= set(original)
    assert all(recovered[offset] == original[offset] for offset in recovered)
