"""pika's frame loop over the broker's deliveries cut into reads of several sizes: does the shape of what the
broker writes change what pika spends per message?

``python benchmarks/amqp_pika_chunks.py [--messages 20000] [--sizes 512 1024 4096 ...] [--trials 5]``
encodes ``--messages`` deliveries of a 100-byte body with mqbroker's own encoder (``codec.encode_deliver``:
basic.deliver, content header with delivery-mode 2, body, as ``amqp_bench``'s consumer receives them), cuts
the stream into reads of each size and hands them to pika's ``Connection._on_data_available`` (its buffer
append, ``frame.decode_frame`` and buffer trim; frame dispatch replaced by a counter, since it costs the same
whatever the cut). It prints the best and the median of ``--trials`` in µs of CPU per message for each
size (the sizes alternate within a trial). pika reads its socket 4,096 bytes at a time
(``_AsyncTransportBase._MAX_RECV_BYTES``), so a read is never larger, and is smaller only when the socket
holds less.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time
from typing import Any

import pika.connection

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mqbroker.protocols.amqp import codec  # noqa: E402
from mqbroker.protocols.amqp.spec import BasicProperties  # noqa: E402

#: pika's consumer tag form (``ctag1.`` and 32 hex digits), as a shortstr.
CONSUMER_TAG = b"\x26ctag1." + b"0" * 32


class FrameLoop:
    """Just pika's ``Connection`` frame-buffer loop, counting the frames it decodes."""

    _on_data_available = pika.connection.Connection._on_data_available
    _read_frame = pika.connection.Connection._read_frame
    _trim_frame_buffer = pika.connection.Connection._trim_frame_buffer

    def __init__(self) -> None:
        self._frame_buffer = b""
        self.bytes_received = 0
        self.frames = 0

    def _process_frame(self, _: Any) -> None:
        self.frames += 1


def delivery_stream(messages: int) -> bytes:
    """``messages`` deliveries on channel 1, as mqbroker writes them."""
    properties_raw = codec.encode_properties(BasicProperties(delivery_mode=2))
    return b"".join(codec.encode_deliver(1, CONSUMER_TAG, tag, False, "", "queue", properties_raw, b"x" * 100,
                                         131_072) for tag in range(1, messages + 1))


def cpu_us_per_message(reads: list[bytes], messages: int) -> float:
    """CPU µs per message for pika to frame ``reads``, one after the other."""
    loop = FrameLoop()
    started = time.process_time()
    for data in reads:
        loop._on_data_available(data)
    spent_s = time.process_time() - started
    assert loop.frames == 3 * messages, loop.frames
    return spent_s * 1e6 / messages


def main() -> None:
    """Time each read size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 2048, 4096, 8192, 16384, 65536])
    parser.add_argument("--trials", type=int, default=5)
    arguments = parser.parse_args()
    stream = delivery_stream(arguments.messages)
    cuts = {size: [stream[start:start + size] for start in range(0, len(stream), size)] for size in arguments.sizes}
    spent: dict[int, list[float]] = {size: [] for size in arguments.sizes}
    for _ in range(arguments.trials):  # sizes alternate within each trial: a busy spell hits them all
        for size, reads in cuts.items():
            spent[size].append(cpu_us_per_message(reads, arguments.messages))
    print(f"{arguments.messages:,} deliveries, {len(stream) / arguments.messages:.0f} bytes each; best and median of "
          f"{arguments.trials} trials, load average {os.getloadavg()[0]:.1f}")
    for size, figures in spent.items():
        print(f"  reads of {size:6,} bytes: {min(figures):6.2f} µs per message (median {statistics.median(figures):.2f})")


if __name__ == "__main__":
    main()
