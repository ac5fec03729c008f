"""Written versus durable: what a flush covers, group commit across threads, split flushes and truncations."""

from __future__ import annotations

import os
import threading

import pytest

from mqbroker.storage.config import LogConfig
from tests.unit.storage.logtools import open_log, payload_batch


def test_append_is_written_before_it_is_durable(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1), now_ms=0)
    assert log.log_end_offset == 1 and log.durable_end_offset == 0
    assert log.needs_flush(now_ms=0)
    assert log.flush() == 1 and log.durable_end_offset == 1
    assert not log.needs_flush(now_ms=0)


def test_a_split_flush_makes_durable_what_was_appended_before_it_began(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1), now_ms=0)
    ticket = log.begin_flush()
    assert ticket.end_offset == 1 and ticket.handles
    log.append(payload_batch(2), now_ms=0)  # after the capture: the next flush's business
    for handle in ticket.handles:
        os.fsync(handle)
    assert log.end_flush(ticket, synced=True) == 1
    assert log.durable_end_offset == 1 and log.log_end_offset == 2
    assert [log_file.pins for log_file in ticket.pinned] == [0]  # end_flush let go of the active segment's file


def test_a_flush_borrows_the_active_segments_descriptor_and_opens_only_what_it_alone_needs(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1), now_ms=0)
    log.roll(now_ms=0)
    log.append(payload_batch(2), now_ms=0)
    ticket = log.begin_flush()
    sealed_file, active_file = ticket.pinned
    assert sealed_file.fd in ticket.handles and active_file.fd in ticket.handles
    assert len(ticket.opened) == 4  # the sealed segment's three indexes (offset, time, aborted transactions) and the directory
    log.end_flush(ticket, synced=True)
    assert sealed_file.pins == active_file.pins == 0 and active_file.fd is not None  # still open for the next append
    for handle in ticket.opened:  # end_flush closed the flush's own descriptors
        with pytest.raises(OSError):
            os.fstat(handle)


def test_a_split_flush_that_failed_publishes_nothing(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1), now_ms=0)
    ticket = log.begin_flush()
    assert log.end_flush(ticket, synced=False) == 0
    assert log.durable_end_offset == 0


def test_a_truncation_during_a_split_flush_keeps_its_end_from_being_published(tmp_path):
    log = open_log(tmp_path)
    for tag in range(3):
        log.append(payload_batch(tag), now_ms=0)
    ticket = log.begin_flush()
    log.truncate_to(1)
    log.append(payload_batch(9), now_ms=0)
    assert log.end_flush(ticket, synced=True) == 0  # offset 1 and 2 are other batches now
    assert log.flush() == 2


def test_a_split_flush_covers_a_sealed_segment_and_its_indexes(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1), now_ms=0)
    log.roll(now_ms=0)
    log.append(payload_batch(2), now_ms=0)
    ticket = log.begin_flush()
    assert len(ticket.handles) >= 4  # the sealed .log, its two indexes, the active .log (and the directory)
    log.end_flush(ticket, synced=True)
    log.append(payload_batch(3), now_ms=0)
    next_ticket = log.begin_flush()
    assert len(next_ticket.handles) == 1  # only the active segment is left to sync
    log.end_flush(next_ticket, synced=True)


def test_a_flush_of_a_log_whose_writes_are_all_durable_syncs_nothing(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1), now_ms=0)
    assert log.has_unsynced()
    log.flush()
    assert not log.has_unsynced()
    ticket = log.begin_flush()
    assert ticket.handles == [] and ticket.end_offset == 1
    assert log.end_flush(ticket, synced=True) == 1


def test_what_a_running_flush_covers_is_not_unsynced_but_what_follows_it_is(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1), now_ms=0)
    ticket = log.begin_flush()
    assert not log.has_unsynced()  # the running flush covers it: another round would sync nothing new
    log.append(payload_batch(2), now_ms=0)
    assert log.has_unsynced()
    log.end_flush(ticket, synced=True)
    assert log.has_unsynced() and log.flush() == 2 and not log.has_unsynced()


def test_a_second_flush_racing_a_running_one_still_syncs_before_it_publishes(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1), now_ms=0)
    first = log.begin_flush()
    second = log.begin_flush()  # nothing new, but the first has not synced yet: this one must sync itself
    assert second.handles and second.end_offset == 1
    log.end_flush(second, synced=False)
    log.end_flush(first, synced=False)
    assert log.durable_end_offset == 0


def test_after_a_failed_flush_the_log_is_unsynced_until_one_succeeds(tmp_path):
    log = open_log(tmp_path)
    log.append(payload_batch(1), now_ms=0)
    log.roll(now_ms=0)  # a directory change to hand on
    ticket = log.begin_flush()
    assert not log.has_unsynced()
    log.end_flush(ticket, synced=False)
    assert log.has_unsynced()
    retry = log.begin_flush()
    assert retry.directory_changed and retry.handles
    assert log.end_flush(retry, synced=True) == 1 and not log.has_unsynced()


def test_interval_policy_asks_for_a_flush_by_time_or_count(tmp_path):
    log = open_log(tmp_path, LogConfig(flush_policy="interval", flush_ms=100, flush_messages=5))
    log.append(payload_batch(1, 2), now_ms=1000)
    assert not log.needs_flush(now_ms=1050)
    assert log.needs_flush(now_ms=1100)
    log.flush()
    log.append(payload_batch(2, 5), now_ms=2000)
    assert log.needs_flush(now_ms=2000)


def test_appends_go_on_while_another_thread_flushes(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=64 * 1024))
    stop = threading.Event()
    durable: list[int] = []

    def flusher() -> None:
        while not stop.is_set():
            durable.append(log.flush())

    thread = threading.Thread(target=flusher)
    thread.start()
    for tag in range(500):
        log.append(payload_batch(tag), now_ms=0)
    stop.set()
    thread.join()
    assert durable == sorted(durable) and durable[-1] <= 500
    assert log.flush() == 500
