"""Recovery after an unclean stop: every batch is checked and the log is cut at the first invalid byte."""

from __future__ import annotations

import os
import random
import shutil
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.records.header import iter_batches, read_header
from tests.powerloss import PowerCut, power_loss_disks
from tests.unit.storage.logtools import open_log, payload_batch, read_all

BATCH_COUNT = 60


def written_log(directory) -> list[bytes]:
    """A closed log of several segments; returns its batches as stored."""
    log = open_log(directory)
    for tag in range(BATCH_COUNT):
        log.append(payload_batch(tag, record_count=1 + tag % 3), now_ms=0)
    batches = read_all(log)
    log.close()
    return batches


def active_segment(directory) -> str:
    return sorted(str(directory / name) for name in os.listdir(directory) if name.endswith(".log"))[-1]


def batches_in_other_segments(directory, batches: list[bytes]) -> int:
    """How many of ``batches`` lie before the active segment."""
    active_base = int(os.path.basename(active_segment(directory))[:20])
    return sum(1 for batch in batches if int.from_bytes(batch[:8], "big") < active_base)


def fresh_copy(template, scratch) -> object:
    target = scratch / "log"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(template, target)
    return target


@given(cut=st.integers(min_value=0, max_value=10_000))
@settings(max_examples=40)
def test_torn_tail_is_truncated_on_recovery(tmp_path_factory, cut):
    template = tmp_path_factory.mktemp("template")
    batches = written_log(template)
    directory = fresh_copy(template, tmp_path_factory.mktemp("scratch"))
    path = active_segment(directory)
    size = os.path.getsize(path)
    keep = cut % (size + 1)
    os.truncate(path, keep)
    prefix = batches_in_other_segments(directory, batches)
    whole = 0
    with open(path, "rb") as file:
        data = file.read()
    position = 0
    for batch in batches[prefix:]:
        if position + len(batch) > keep:
            break
        position += len(batch)
        whole += 1
    log = open_log(directory)
    assert read_all(log) == batches[: prefix + whole]
    assert os.path.getsize(path) == position and data[:position] == b"".join(batches[prefix : prefix + whole])
    assert log.append(payload_batch(99), now_ms=0).base_offset == log.log_end_offset - 1


@given(garbage=st.binary(min_size=1, max_size=300))
@settings(max_examples=40)
def test_garbage_after_the_last_batch_is_cut_on_recovery(tmp_path_factory, garbage):
    directory = tmp_path_factory.mktemp("log")
    batches = written_log(directory)
    with open(active_segment(directory), "ab") as file:
        file.write(garbage)
    log = open_log(directory)
    assert read_all(log) == batches


@given(flip=st.integers(min_value=0))
@settings(max_examples=40)
def test_a_damaged_last_batch_is_dropped_on_recovery(tmp_path_factory, flip):
    directory = tmp_path_factory.mktemp("log")
    batches = written_log(directory)
    path = active_segment(directory)
    size = os.path.getsize(path)
    # The base offset and leader epoch (bytes 0-7, 12-15) lie outside the CRC by design, as in
    # Kafka, so the broker can stamp them; every other byte of the batch is covered.
    covered = [byte for byte in range(len(batches[-1])) if not (byte < 8 or 12 <= byte < 16)]
    position = size - len(batches[-1]) + covered[flip % len(covered)]
    with open(path, "r+b") as file:
        file.seek(position)
        byte = file.read(1)
        file.seek(position)
        file.write(bytes([byte[0] ^ 0x5A]))
    log = open_log(directory)
    assert read_all(log) == batches[:-1]


def test_damage_in_an_old_segment_drops_everything_after_it(tmp_path):
    batches = written_log(tmp_path)
    first = sorted(name for name in os.listdir(tmp_path) if name.endswith(".log"))[0]
    with open(tmp_path / first, "r+b") as file:
        file.seek(200)
        file.write(b"\xff" * 8)
    log = open_log(tmp_path)
    recovered = read_all(log)
    assert recovered == batches[: len(recovered)] and len(recovered) < 10
    assert log.segment_bases() == [0]


def test_recovery_starts_at_the_recovery_point(tmp_path):
    batches = written_log(tmp_path)
    first = sorted(name for name in os.listdir(tmp_path) if name.endswith(".log"))[0]
    with open(tmp_path / first, "r+b") as file:
        file.seek(200)
        file.write(b"\xff" * 8)  # below the recovery point, so deliberately not rescanned
    log = open_log(tmp_path, recovery_point=log_end(batches))
    assert log.log_end_offset == log_end(batches)


def log_end(batches: list[bytes]) -> int:
    return [header.next_offset for _, header in iter_batches(batches[-1])][0]


def test_missing_or_corrupt_indexes_are_rebuilt(tmp_path):
    batches = written_log(tmp_path)
    bases = open_log(tmp_path, clean_shutdown=True).segment_bases()
    names = sorted(os.listdir(tmp_path))
    for name in names:
        if name.endswith(".index") and int(name[:20]) % 2 == 0:
            os.unlink(tmp_path / name)
        elif name.endswith(".index"):
            with open(tmp_path / name, "r+b") as file:
                file.write(b"\x7f\xff\xff\xff\x00\x00\x00\x00")
        elif name.endswith(".timeindex"):
            with open(tmp_path / name, "ab") as file:
                file.write(b"\x01\x02\x03")
    log = open_log(tmp_path, clean_shutdown=True)
    assert read_all(log) == batches
    assert log.segment_bases() == bases
    for offset in range(0, log.log_end_offset, 7):
        first = next(iter_batches(log.read(offset, 1).records))[1]
        assert first.base_offset <= offset <= first.last_offset


@pytest.mark.parametrize("clean_shutdown", [True, False], ids=["clean", "unclean"])
def test_an_index_entry_pointing_inside_a_batch_is_rebuilt_not_an_error(tmp_path, clean_shutdown):
    """A power loss can leave an index with entries its `.log` never had (the index is synced later)."""
    batches = written_log(tmp_path)
    bases = open_log(tmp_path, clean_shutdown=True).segment_bases()
    log = open_log(tmp_path, clean_shutdown=True)
    log.close()
    for base in bases[:-1]:
        with open(tmp_path / f"{base:020d}.index", "r+b") as file:
            file.seek(0, os.SEEK_END)
            file.write(struct.pack(">ii", 2**30, 7))  # a last entry at byte 7: inside the first batch
    log = open_log(tmp_path, clean_shutdown=clean_shutdown, recovery_point=bases[-1])
    assert read_all(log) == batches and log.segment_bases() == bases


def test_unclean_restart_keeps_every_valid_batch_and_is_durable(tmp_path):
    log = open_log(tmp_path)
    for tag in range(40):
        log.append(payload_batch(tag), now_ms=0)
    expected = read_all(log)  # never flushed or closed: the process "died" here
    reopened = open_log(tmp_path)
    assert read_all(reopened) == expected
    assert reopened.durable_end_offset == reopened.log_end_offset == 40


def test_a_segment_rolled_before_its_predecessor_was_durable_leaves_no_hole_after_a_power_loss(tmp_path):
    with power_loss_disks(str(tmp_path)) as (disk,):
        log = open_log(tmp_path)
        log.append(payload_batch(1), now_ms=0)
        log.flush()
        log.append(payload_batch(2), now_ms=0)  # not flushed: a power loss may take it
        log.roll(now_ms=0)  # a new segment named 2
        log.snapshot_producers()  # its atomic write fsyncs the directory: the new name is durable
        disk.crash(random.Random(0), lose_everything=True)
        recovered = open_log(tmp_path)
        batches = read_all(recovered)
    assert recovered.log_end_offset == read_header(batches[-1]).next_offset, "offsets before the log end hold nothing"


@pytest.mark.parametrize("crash_seed", [None, 0, 1, 2, 3, 4], ids=lambda seed: "killed" if seed is None else f"torn-{seed}")
@pytest.mark.parametrize("cut", [3, 0], ids=["inside-the-first-segment", "everything"])
def test_a_truncation_cut_short_by_a_power_loss_leaves_a_log_without_holes(tmp_path, cut, crash_seed):
    """Whatever a power loss keeps of a truncation, at any of its calls, the log that remains is contiguous."""
    calls = 1
    while True:
        directory = tmp_path / str(calls)
        with power_loss_disks(str(directory)) as (disk,):
            log = open_log(directory)
            for tag in range(40):
                log.append(payload_batch(tag, value_bytes=400), now_ms=0)
            log.flush()
            assert len(log.segment_bases()) > 3
            disk.cut_power_after(calls)
            try:
                log.truncate_to(cut)
            except PowerCut:
                disk.crash(random.Random(crash_seed), keep_everything=crash_seed is None)
            else:
                break
            recovered = open_log(directory, recovery_point=39)  # the truncated offsets were all durable
            offsets = [(read_header(batch).base_offset, read_header(batch).next_offset) for batch in read_all(recovered)]
        assert all(end == next_base for (_, end), (next_base, _) in zip(offsets, offsets[1:])), f"a hole: {offsets}"
        assert recovered.log_end_offset == (offsets[-1][1] if offsets else recovered.log_start_offset)
        calls += 1
    assert calls > 6, "the truncation made too few file-system calls to be cut in its middle"


def test_a_leftover_gone_before_recovery_removes_it_does_not_fail_the_open(tmp_path, monkeypatch):
    """The tidy-up lists the directory, then unlinks leftovers: one already gone (seen once in a crash test,
    cause not found) is what that step wants, not a reason to refuse the log."""
    log = open_log(tmp_path)
    log.append(payload_batch(1), now_ms=0)
    log.close()
    listed = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path: [*listed(path), "00000000000000000099.txnindex", "x.tmp"])
    reopened = open_log(tmp_path)
    assert len(read_all(reopened)) == 1
    reopened.close()
