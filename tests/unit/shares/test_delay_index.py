"""The on-disk delay index: due entries come out earliest first, per share partition, once each."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.shares.delay_index import DelayIndex, IndexedDelay


def entry(share_partition: int, offset: int, deliver_at_ms: int, delivery_count: int = 0,
          batch: bytes | None = None) -> IndexedDelay:
    return IndexedDelay(share_partition, offset, deliver_at_ms, delivery_count, batch)


def test_due_entries_come_out_earliest_first_and_only_once(tmp_path: Path) -> None:
    """``take_due`` returns what is due by now, by time then offset, and removes it."""
    index = DelayIndex(str(tmp_path / "delays.db"))
    index.add([entry(0, 5, 300), entry(0, 1, 200), entry(0, 2, 200), entry(0, 9, 900, batch=b"\x00batch")])
    assert index.next_deliver_at_ms(0) == 200
    assert index.take_due(250, 0, 10) == [entry(0, 1, 200), entry(0, 2, 200)]
    assert index.take_due(250, 0, 10) == []
    assert index.take_due(1_000, 0, 1) == [entry(0, 5, 300)]
    assert index.take_due(1_000, 0, 10) == [entry(0, 9, 900, batch=b"\x00batch")]
    assert index.count(0) == 0 and index.next_deliver_at_ms(0) is None
    index.close()


def test_share_partitions_do_not_see_each_others_entries(tmp_path: Path) -> None:
    """Entries of one share partition are taken, counted and deleted apart from the others'."""
    index = DelayIndex(str(tmp_path / "delays.db"))
    index.add([entry(1, 0, 10), entry(2, 0, 10), entry(2, 7, 20)])
    assert index.take_due(100, 1, 10) == [entry(1, 0, 10)]
    assert index.count(2) == 2 and index.offsets_from(2, 5) == [7]
    index.remove_partition(2)
    assert index.count(2) == 0
    index.close()


def test_adding_an_entry_again_replaces_it(tmp_path: Path) -> None:
    """A due record's entry rewritten with a new delivery count is one entry, not two."""
    index = DelayIndex(str(tmp_path / "delays.db"))
    index.add([entry(0, 3, 100, 1)])
    index.add([entry(0, 3, 100, 2)])
    index.remove([(0, 99)])
    assert index.take_due(100, 0, 10) == [entry(0, 3, 100, 2)]
    index.close()


def test_a_new_hosting_starts_from_an_empty_file_and_closing_deletes_it(tmp_path: Path) -> None:
    """The index is derived data: a leftover file (and journal) is replaced, and close removes the file."""
    path = tmp_path / "nested" / "delays.db"
    first = DelayIndex(str(path))
    first.add([entry(0, 1, 1)])
    Path(str(path) + "-journal").write_bytes(b"stale")
    second = DelayIndex(str(path))
    assert second.count(0) == 0
    assert not os.path.exists(str(path) + "-journal")
    second.close()
    assert not path.exists()


def test_many_entries_cost_a_bounded_cache_and_come_out_in_order(tmp_path: Path) -> None:
    """100,000 scheduled records: taken in bounded slices, earliest first, each exactly once."""
    index = DelayIndex(str(tmp_path / "delays.db"))
    count = 100_000
    index.add(entry(0, offset, (offset * 7919) % count) for offset in range(count))
    assert int(index._db.execute("PRAGMA cache_size").fetchone()[0]) < 0, "cache bounded in KiB"
    taken: list[IndexedDelay] = []
    while batch := index.take_due(count, 0, 5_000):
        assert len(batch) <= 5_000
        taken.extend(batch)
    assert len(taken) == count and len({e.offset for e in taken}) == count
    assert [e.deliver_at_ms for e in taken] == sorted(e.deliver_at_ms for e in taken)
    index.close()


entries = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50), st.integers(0, 1_000), st.integers(0, 5)),
                   max_size=40)


@settings(max_examples=100)
@given(added=entries, removed=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50)), max_size=10),
       now_ms=st.integers(0, 1_000), limit=st.integers(0, 20))
def test_the_index_behaves_as_a_dictionary_ordered_by_time(tmp_path_factory, added: list, removed: list,
                                                           now_ms: int, limit: int) -> None:
    """Against a dict model: take_due gives the ``limit`` earliest due entries of one share partition."""
    index = DelayIndex(str(tmp_path_factory.mktemp("index") / "delays.db"))
    model: dict[tuple[int, int], IndexedDelay] = {}
    for share_partition, offset, at, count in added:
        model[(share_partition, offset)] = entry(share_partition, offset, at, count)
    index.add(model.values())
    index.remove(removed)
    for key in removed:
        model.pop(key, None)
    for share_partition in range(3):
        due = sorted((e for e in model.values() if e.share_partition == share_partition and e.deliver_at_ms <= now_ms),
                     key=lambda e: (e.deliver_at_ms, e.offset))[:limit]
        assert index.take_due(now_ms, share_partition, limit) == due
        left = [e for e in model.values() if e.share_partition == share_partition and e not in due]
        assert index.count(share_partition) == len(left)
        assert index.next_deliver_at_ms(share_partition) == min((e.deliver_at_ms for e in left), default=None)
    index.close()
