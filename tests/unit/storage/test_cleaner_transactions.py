"""Compaction and transactions (Kafka's cleaner rules): aborted data goes whatever its key and never supersedes a
committed value, nothing past an open transaction is cleaned, markers stay while their data does and go a
delete horizon later with their index entries, and the compacted log replays without a hanging transaction."""

from __future__ import annotations

import os

from mqbroker.records.decoder import decode_records
from mqbroker.records.header import iter_batches
from mqbroker.storage import cleaner
from mqbroker.storage.config import LogConfig
from tests.unit.storage.logtools import make_batch, open_log, read_all
from tests.unit.storage.txntools import append_marker, append_txn, marker, read_committed_values, txn_batch

RETENTION_MS = 1000
COMPACTED = LogConfig(
    segment_bytes=2048, index_interval_bytes=256, cleanup_policy="compact", delete_retention_ms=RETENTION_MS
)
P1, P2 = 7, 8
#: Later than every batch's timestamp (min.compaction.lag.ms is 0).
NOW_MS = 5_000
PAD = b"." * 300


def _keyed(log, key: bytes, value: bytes) -> None:
    log.append(make_batch([value + PAD], keys=[key]), 0)


def _markers(log) -> list[tuple[int, int]]:
    return [(header.base_offset, header.producer_id) for batch in read_all(log)
            for _, header in iter_batches(batch) if header.is_control]


def _records(log) -> dict[int, tuple[bytes | None, bytes | None]]:
    return {record.offset: (record.key, record.value) for batch in read_all(log)
            for _, header in iter_batches(batch) if not header.is_control for record in decode_records(batch)}


def _roll_past(log) -> None:
    for n in range(8):
        _keyed(log, b"filler-%d" % n, b"f")
    log.roll(0)


def test_aborted_records_go_whatever_their_key_and_never_supersede_a_committed_value(tmp_path):
    log = open_log(tmp_path, COMPACTED)
    _keyed(log, b"k", b"committed-old")
    append_txn(log, txn_batch(P1, 0, [b"aborted" + PAD], keys=[b"k"]))
    append_txn(log, txn_batch(P1, 1, [b"aborted-unique" + PAD], keys=[b"only-aborted"]))
    append_marker(log, marker(P1, committed=False))
    append_txn(log, txn_batch(P2, 0, [b"committed-new" + PAD], keys=[b"j"]))
    append_marker(log, marker(P2, committed=True))
    _roll_past(log)
    before = read_committed_values(log)
    assert cleaner.clean(log, NOW_MS, force=True).ran
    values = {key: value for key, value in _records(log).values()}
    assert values[b"k"] == b"committed-old" + PAD and b"only-aborted" not in values
    assert values[b"j"] == b"committed-new" + PAD
    assert read_committed_values(log) == [value for value in before if value is not None]


def test_nothing_at_or_after_an_open_transaction_is_cleaned(tmp_path):
    log = open_log(tmp_path, COMPACTED)
    append_txn(log, txn_batch(P1, 0, [b"open" + PAD], keys=[b"k"]))
    for round_number in range(3):
        _keyed(log, b"k2", b"v%d" % round_number)
    _roll_past(log)
    before = read_all(log)
    result = cleaner.clean(log, NOW_MS, force=True)
    assert not result.ran and read_all(log) == before


def test_a_marker_stays_with_its_data_then_goes_a_delete_horizon_after_it_with_its_index_entry(tmp_path):
    log = open_log(tmp_path, COMPACTED)
    append_txn(log, txn_batch(P1, 0, [b"a" + PAD], keys=[b"k"]))
    abort_at = append_marker(log, marker(P1, committed=False))
    append_txn(log, txn_batch(P2, 0, [b"c" + PAD], keys=[b"k"]))
    commit_at = append_marker(log, marker(P2, committed=True))
    _keyed(log, b"k", b"newer")  # supersedes P2's committed value
    log.append(make_batch([b"x"], producer_id=P1, producer_epoch=0, base_sequence=1), 0)  # P1's latest batch
    log.append(make_batch([b"y"], producer_id=P2, producer_epoch=0, base_sequence=1), 0)  # P2's latest batch
    _roll_past(log)
    cleaner.clean(log, NOW_MS, force=True)
    # The data of both transactions is gone: their markers get a horizon but stay until it passes.
    assert [offset for offset, _ in _markers(log)] == [abort_at, commit_at]
    assert log.aborted_transactions(0, log.log_end_offset)
    cleaner.clean(log, NOW_MS + RETENTION_MS, force=True)
    assert _markers(log) == []
    assert log.aborted_transactions(0, log.log_end_offset) == []
    reopened = open_log(tmp_path, COMPACTED, clean_shutdown=False, recovery_point=0)
    assert reopened.open_transactions() == {} and reopened.aborted_transactions(0, reopened.log_end_offset) == []


def test_a_marker_whose_data_is_kept_as_a_producers_latest_header_stays(tmp_path):
    log = open_log(tmp_path, COMPACTED)
    append_txn(log, txn_batch(P1, 0, [b"a" + PAD], keys=[b"k"]))
    abort_at = append_marker(log, marker(P1, committed=False))
    _roll_past(log)
    cleaner.clean(log, NOW_MS, force=True)
    cleaner.clean(log, NOW_MS + RETENTION_MS, force=True)
    # P1's aborted batch is its latest: kept as an empty header, so the marker that ends it stays too.
    assert [offset for offset, _ in _markers(log)] == [abort_at]
    assert log.aborted_transactions(0, log.log_end_offset)[0].last_offset == abort_at
    reopened = open_log(tmp_path, COMPACTED, recovery_point=0)
    assert reopened.open_transactions() == {}


def test_a_crash_after_the_swap_commit_point_finishes_with_the_rewritten_index(tmp_path, monkeypatch):
    log = open_log(tmp_path, COMPACTED)
    append_txn(log, txn_batch(P1, 0, [b"a" + PAD], keys=[b"k"]))
    append_marker(log, marker(P1, committed=False))
    log.append(make_batch([b"x"], producer_id=P1, producer_epoch=0, base_sequence=1), 0)
    _roll_past(log)
    cleaner.clean(log, NOW_MS, force=True)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(log, "swap_in", crash)
    try:
        cleaner.clean(log, NOW_MS + RETENTION_MS, force=True)
    except KeyboardInterrupt:
        pass
    assert any(name.endswith(".log.swap") for name in os.listdir(tmp_path))
    assert any(name.endswith(".txnindex.cleaned") for name in os.listdir(tmp_path))
    reopened = open_log(tmp_path, COMPACTED, recovery_point=0)
    assert _markers(reopened) == [] and reopened.aborted_transactions(0, reopened.log_end_offset) == []
    assert not any(name.endswith((".swap", ".cleaned")) for name in os.listdir(tmp_path))
