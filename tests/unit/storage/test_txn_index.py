"""The `.txnindex` file: entries round trip, truncation, the search a read_committed fetch makes, garbage refused."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mqbroker.storage.errors import CorruptFileError
from mqbroker.storage.txn_index import (
    ENTRY_BYTES,
    AbortedTxn,
    TransactionIndex,
    collect_aborted,
    decode_entries,
    encode_entries,
)


def entry(first: int, last: int, stable: int | None = None, producer_id: int = 1) -> AbortedTxn:
    return AbortedTxn(producer_id=producer_id, first_offset=first, last_offset=last,
                      last_stable_offset=last + 1 if stable is None else stable)


def test_entries_are_34_bytes_and_round_trip(tmp_path):
    index = TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"))
    index.reset()
    index.append(entry(0, 5))
    index.append(entry(3, 9, stable=3, producer_id=2))
    index.write_pending()
    assert (tmp_path / "00000000000000000000.txnindex").stat().st_size == 2 * ENTRY_BYTES == 68
    again = TransactionIndex(index.path)
    assert again.load(0, 10) and again.entries() == [entry(0, 5), entry(3, 9, stable=3, producer_id=2)]


def test_truncation_drops_entries_at_and_after_the_cut(tmp_path):
    index = TransactionIndex(str(tmp_path / "x.txnindex"))
    index.reset()
    for last in (4, 8, 12):
        index.append(entry(last - 2, last))
    index.write_pending()
    index.truncate_from(8)
    assert [e.last_offset for e in index.entries()] == [4]
    again = TransactionIndex(index.path)
    assert again.load(0, 100) and [e.last_offset for e in again.entries()] == [4]


def test_entries_outside_the_segment_make_the_file_doubtful(tmp_path):
    index = TransactionIndex(str(tmp_path / "x.txnindex"))
    (tmp_path / "x.txnindex").write_bytes(encode_entries([entry(0, 50)]))
    assert not index.load(0, 50) and index.entries() == []
    assert not TransactionIndex(str(tmp_path / "missing.txnindex")).load(0, 10)


class _Segment:
    def __init__(self, base_offset: int, entries: list[AbortedTxn]) -> None:
        self.base_offset = base_offset
        self.txn_index = TransactionIndex("unused")
        self.txn_index._entries = entries


def test_the_search_stops_once_an_entry_proves_nothing_later_overlaps():
    segments = [_Segment(0, [entry(0, 3), entry(5, 8, stable=9)]), _Segment(10, [entry(6, 12)])]
    assert collect_aborted(segments, 2, 9) == [entry(0, 3), entry(5, 8, stable=9)]
    # an upper bound past the proof goes on to the next segment
    assert collect_aborted(segments, 4, 11) == [entry(5, 8, stable=9), entry(6, 12)]


@given(st.binary(max_size=200), st.integers(0, 1000), st.integers(0, 2000))
def test_garbage_is_refused_with_corrupt_file_error(data, base, end):
    try:
        entries = decode_entries(data, base, end)
    except CorruptFileError:
        return
    assert all(base <= e.last_offset < end and 0 <= e.first_offset <= e.last_offset for e in entries)
