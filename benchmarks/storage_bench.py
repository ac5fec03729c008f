"""Storage engine throughput: appends (interval and sync group commit), reads, recovery, against a yardstick.

Run ``python benchmarks/storage_bench.py [--volume-mib N] [--json] [--directory DIR]``. Every
figure moves the same volume; the yardstick is a plain sequential file write and read with the
same buffer size in the same run, so the ratios mean something on a shared machine. Write
figures are measured to the point where the volume is durable (the yardstick and the interval
policy end with an fsync, the interval run also flushes every flush.ms on a flusher thread, as
the broker does); ``*_unsynced_*`` figures stop at the last write (page cache only). Progress
goes to stderr; the table (or one JSON object with ``--json``) to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.records import BatchBuilder

MIB = 1024 * 1024
GIB = 1024 * MIB
RECORD_VALUE = b"v" * 100
LARGE_BATCH_BYTES = MIB
SMALL_BATCH_BYTES = 16 * 1024
SYNC_APPENDERS = 64
TIMESTAMP_MS = 1_700_000_000_000


def build_batch(size_bytes: int) -> bytes:
    """A client batch of 100-byte records, as close to ``size_bytes`` as whole records allow."""
    builder = BatchBuilder()
    while builder.size_bytes + len(RECORD_VALUE) + 8 <= size_bytes:
        builder.append(TIMESTAMP_MS, None, RECORD_VALUE)
    return builder.build()


def progress(message: str) -> None:
    """One progress line on stderr."""
    print(message, file=sys.stderr, flush=True)


def timed(function: Callable[[], object]) -> float:
    """Wall seconds of one call."""
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def yardstick_write(path: str, volume_bytes: int) -> tuple[float, float]:
    """Plain sequential write then fsync of ``volume_bytes`` with a 1 MiB buffer: (to last write, to durable)."""
    buffer = os.urandom(LARGE_BATCH_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    started = time.perf_counter()
    for _ in range(volume_bytes // len(buffer)):
        os.write(fd, buffer)
    written = time.perf_counter() - started
    os.fsync(fd)
    durable = time.perf_counter() - started
    os.close(fd)
    return written, durable


def yardstick_read(path: str) -> float:
    """Seconds for a plain sequential read of the file with a 1 MiB buffer."""
    fd = os.open(path, os.O_RDONLY)
    started = time.perf_counter()
    while os.read(fd, LARGE_BATCH_BYTES):
        pass
    seconds = time.perf_counter() - started
    os.close(fd)
    return seconds


def monotonic_ms() -> int:
    """The benchmark's clock for the log's now_ms arguments."""
    return int(time.monotonic() * 1000)


def append_interval(directory: str, batch: bytes, volume_bytes: int) -> tuple[float, float]:
    """Append ``volume_bytes`` of ``batch`` under the interval policy with a flusher thread.

    Returns (seconds to the last append, seconds until everything is durable).
    """
    log = PartitionLog.open(directory, LogConfig(flush_policy="interval"), now_ms=monotonic_ms())
    count = volume_bytes // len(batch)
    done = threading.Event()

    def flusher() -> None:
        while not done.wait(0.01):
            if log.needs_flush(monotonic_ms()):
                log.flush()

    thread = threading.Thread(target=flusher)
    thread.start()
    started = time.perf_counter()
    for _ in range(count):
        log.append(batch, now_ms=monotonic_ms())
    written = time.perf_counter() - started
    done.set()
    thread.join()
    log.flush()
    durable = time.perf_counter() - started
    log.close()
    return written, durable


def append_sync(directory: str, batch: bytes, volume_bytes: int) -> float:
    """Seconds for 64 threads to append ``volume_bytes``, each waiting until its batch is durable."""
    log = PartitionLog.open(directory, LogConfig(flush_policy="sync"), now_ms=0)
    remaining = [volume_bytes // len(batch)]
    durable = threading.Condition()
    done = threading.Event()

    def appender() -> None:
        while True:
            with durable:
                if remaining[0] == 0:
                    return
                remaining[0] -= 1
            last_offset = log.append(batch, now_ms=0).last_offset
            with durable:
                durable.notify_all()  # wake the flusher
                while log.durable_end_offset <= last_offset:
                    durable.wait()

    def flusher() -> None:
        while not done.is_set():
            with durable:
                while log.durable_end_offset == log.log_end_offset and not done.is_set():
                    durable.wait(0.01)
            log.flush()
            with durable:
                durable.notify_all()

    threads = [threading.Thread(target=appender) for _ in range(SYNC_APPENDERS)]
    flush_thread = threading.Thread(target=flusher)
    started = time.perf_counter()
    flush_thread.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    done.set()
    flush_thread.join()
    log.close()
    return seconds


def read_sequential(log: PartitionLog) -> tuple[float, int]:
    """Seconds to read the whole log with 1 MiB fetches, and the bytes read."""
    total = 0
    started = time.perf_counter()
    offset, end = 0, log.log_end_offset
    while offset < end:
        data = log.read(offset, LARGE_BATCH_BYTES).records
        total += len(data)
        offset = _next_offset(data)
    return time.perf_counter() - started, total


def _next_offset(data: bytes) -> int:
    """The offset after the last batch in ``data`` (walks the batch lengths only)."""
    position, last_start = 0, 0
    while position < len(data):
        last_start = position
        position += int.from_bytes(data[position + 8 : position + 12], "big") + 12
    base = int.from_bytes(data[last_start : last_start + 8], "big")
    return base + int.from_bytes(data[last_start + 23 : last_start + 27], "big") + 1


def recover(directory: str) -> float:
    """Seconds for an unclean open that checks every batch of the log."""
    for name in os.listdir(directory):
        if name.endswith((".index", ".timeindex", ".snapshot")):
            os.unlink(os.path.join(directory, name))
    return timed(lambda: PartitionLog.open(directory, LogConfig(), now_ms=0).close())


def main() -> None:
    """Run every measurement and print the table or JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--volume-mib", type=int, default=1024, help="bytes moved by each measurement (MiB)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--directory", default=None, help="where to write (default: a temporary directory)")
    options = parser.parse_args()
    volume = options.volume_mib * MIB
    root = tempfile.mkdtemp(prefix="storage-bench-", dir=options.directory)
    try:
        large, small = build_batch(LARGE_BATCH_BYTES), build_batch(SMALL_BATCH_BYTES)
        results: dict[str, float] = {}
        mib = volume / MIB
        os.sync()
        yardstick_path = os.path.join(root, "yardstick")
        yardstick_write(yardstick_path, volume)  # warm-up: the first writes of a run pay for fresh page-cache pages
        os.sync()
        progress(f"[1/6] yardstick: plain write and fsync of {options.volume_mib} MiB, 1 MiB buffer")
        written, durable = yardstick_write(yardstick_path, volume)
        results["yardstick_write_mb_per_s"] = mib / durable
        results["yardstick_write_unsynced_mb_per_s"] = mib / written
        large_log = os.path.join(root, "large-0")
        os.sync()
        progress("[2/6] append 1 MiB batches, interval policy")
        written, durable = append_interval(large_log, large, volume)
        results["append_mb_per_s"] = mib / durable
        results["append_unsynced_mb_per_s"] = mib / written
        os.sync()
        progress("[3/6] append 16 KiB batches, interval policy")
        written, durable = append_interval(os.path.join(root, "small-0"), small, volume)
        results["append_small_mb_per_s"] = mib / durable
        results["append_small_unsynced_mb_per_s"] = mib / written
        shutil.rmtree(os.path.join(root, "small-0"))
        os.sync()
        progress(f"[4/6] append 1 MiB batches, sync policy, {SYNC_APPENDERS} appenders sharing fsyncs")
        results["append_sync_64_mb_per_s"] = mib / append_sync(os.path.join(root, "sync-0"), large, volume)
        shutil.rmtree(os.path.join(root, "sync-0"))
        os.sync()
        progress("[5/6] sequential reads from page cache: the log and the yardstick file, best of 3 each")
        log = PartitionLog.open(large_log, LogConfig(), now_ms=0, clean_shutdown=True)
        log_reads, plain_reads = [], []
        for _ in range(3):
            log_reads.append(read_sequential(log))
            plain_reads.append(yardstick_read(yardstick_path))
        log.close()
        seconds, read_bytes = min(log_reads)
        results["read_mb_per_s"] = read_bytes / MIB / seconds
        results["yardstick_read_mb_per_s"] = mib / min(plain_reads)
        os.unlink(yardstick_path)
        progress("[6/6] unclean restart: check every batch, rebuild the indexes")
        results["recovery_s_per_gib"] = recover(large_log) * GIB / read_bytes
        results["volume_mib"] = options.volume_mib
    finally:
        shutil.rmtree(root)
    if options.json:
        print(json.dumps({key: round(value, 3) for key, value in results.items()}))
        return
    print(f"{'measurement':<28}{'value':>12}")
    for key, value in results.items():
        print(f"{key:<28}{value:>12.2f}")
    ratios = {
        "append / yardstick write": results["append_mb_per_s"] / results["yardstick_write_mb_per_s"],
        "append unsynced / yardstick unsynced": results["append_unsynced_mb_per_s"]
        / results["yardstick_write_unsynced_mb_per_s"],
        "read / yardstick read": results["read_mb_per_s"] / results["yardstick_read_mb_per_s"],
        "sync-64 / interval": results["append_sync_64_mb_per_s"] / results["append_mb_per_s"],
    }
    for name, ratio in ratios.items():
        print(f"{name:<40}{ratio:>8.0%}")


if __name__ == "__main__":
    main()
