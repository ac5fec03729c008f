"""A producer's settings, checked together: acks, batching, compression, idempotence, bounds.

Batches default to 256 KiB: Kafka's 16 KiB costs a request per ~150 records of 100 bytes, and a
Python client pays per request what Java pays per record; 256 KiB (~2,000 such records) keeps
request overhead under a percent while a batch stays well below the broker's 1 MiB limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mqbroker.client.backoff import Backoff
from mqbroker.protocols.native.messages import Acks
from mqbroker.records.header import HEADER_BYTES
from mqbroker.records.compression import Compression

#: The broker keeps the last 5 batches per producer and partition, so more in flight breaks dedup.
IDEMPOTENT_IN_FLIGHT_MAX = 5

COMPRESSION_CODECS = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


def parse_acks(value: int | str) -> Acks:
    """Accept 0, 1, -1, "0", "1" or "all", as users write it."""
    if value == "all":
        return Acks.ALL
    try:
        return Acks(int(value))
    except ValueError:
        raise ValueError(f"acks must be 0, 1 or 'all', not {value!r}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig:
    """A producer's settings; ``validated`` checks them together."""

    acks: Acks = Acks.ALL
    linger_ms: int = 5
    batch_size: int = 256 * 1024
    compression: str = "none"
    enable_idempotence: bool = True
    max_in_flight: int = IDEMPOTENT_IN_FLIGHT_MAX
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    #: ``send`` blocks (or fails) while this many bytes wait for acknowledgement.
    buffer_bytes_max: int = 64 * 1024 * 1024
    #: Largest produce request one plan may carry (batches of many partitions together).
    request_bytes_max: int = 8 * 1024 * 1024
    backoff: Backoff = field(default_factory=Backoff)
    #: Makes the producer transactional: its batches belong to the transactions it begins and ends.
    transactional_id: str | None = None
    #: How long the coordinator lets a transaction stay open before it aborts it (transaction.timeout.ms).
    transaction_timeout_ms: int = 60_000

    def validated(self) -> ProducerConfig:
        """Return self, or raise ValueError naming the inconsistent setting."""
        if self.compression not in COMPRESSION_CODECS:
            raise ValueError(f"compression must be one of {sorted(COMPRESSION_CODECS)}, not {self.compression!r}")
        if self.enable_idempotence and self.acks != Acks.ALL and self.acks != Acks.LEADER:
            raise ValueError("idempotence needs acks=1 or acks='all' (set enable_idempotence=False for acks=0)")
        if self.enable_idempotence and not 1 <= self.max_in_flight <= IDEMPOTENT_IN_FLIGHT_MAX:
            raise ValueError(f"idempotence allows 1 to {IDEMPOTENT_IN_FLIGHT_MAX} requests in flight")
        if self.max_in_flight < 1 or self.batch_size < 1 or self.linger_ms < 0:
            raise ValueError("max_in_flight and batch_size must be positive and linger_ms not negative")
        if self.transactional_id is not None and (not self.enable_idempotence or self.acks != Acks.ALL):
            raise ValueError("a transactional producer needs idempotence and acks='all'")
        if self.transactional_id == "" or self.transaction_timeout_ms < 1:
            raise ValueError("transactional_id must not be empty and transaction_timeout_ms must be positive")
        if self.batch_size + HEADER_BYTES > self.request_bytes_max:
            raise ValueError("batch_size must fit in request_bytes_max")
        return self
