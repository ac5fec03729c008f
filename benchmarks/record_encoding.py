"""Producer hot path: encode 100,000 records (8-byte key, 100-byte value) into ~1 MiB batches.

Run ``python benchmarks/record_encoding.py [--compression zstd]``; prints the best of five runs
for encoding (append + build, CRC included) and for decoding the batches back.
"""

from __future__ import annotations

import argparse
import time

from mqbroker.records.builder import BatchBuilder
from mqbroker.records.compression import Compression
from mqbroker.records.decoder import decode_records

RECORDS = 100_000
BATCH_BYTES_MAX = 1024 * 1024
KEY = b"k" * 8
VALUE = b"v" * 100
BASE_TIMESTAMP_MS = 1_700_000_000_000


def encode(compression: Compression) -> list[bytes]:
    """Encode the benchmark's records the way a producer would: fill a batch, build, start another."""
    batches = []
    builder = BatchBuilder(compression=compression)
    for index in range(RECORDS):
        builder.append(BASE_TIMESTAMP_MS + (index >> 9), KEY, VALUE)
        if builder.size_bytes >= BATCH_BYTES_MAX:
            batches.append(builder.build())
            builder = BatchBuilder(compression=compression)
    batches.append(builder.build())
    return batches


def best_seconds(function, repeats: int = 5) -> float:
    """Smallest wall time of ``repeats`` calls (the least disturbed by other processes)."""
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        timings.append(time.perf_counter() - started)
    return min(timings)


def main() -> None:
    """Print encode and decode timings."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compression", default="none", choices=[codec.name.lower() for codec in Compression])
    compression = Compression[parser.parse_args().compression.upper()]
    batches = encode(compression)
    encode_seconds = best_seconds(lambda: encode(compression))
    decode_seconds = best_seconds(lambda: [decode_records(batch) for batch in batches])
    print(
        f"{RECORDS} records, {len(batches)} batches, {sum(map(len, batches))} bytes, compression {compression.name}: "
        f"encode {encode_seconds:.3f} s ({RECORDS / encode_seconds:,.0f} records/s), "
        f"decode {decode_seconds:.3f} s ({RECORDS / decode_seconds:,.0f} records/s)"
    )


if __name__ == "__main__":
    main()
