"""The Redis sink's and source's settings, read from a connector's configuration. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from mqbroker.connectors.settings import RedisAddress, SettingsReader, fill, redis_address

SINK_MODES = ("stream", "pubsub", "keys")
SOURCE_MODES = ("stream", "list")
START_POSITIONS = ("earliest", "latest")
#: Longest a blocking Redis read waits before the task looks around (stop, pause) and reads again.
BLOCK_MS_MAX = 30_000


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisSinkSettings:
    """Copy ``topics`` into Redis: Stream entries, pub/sub messages or the latest value per key."""

    topics: tuple[str, ...]
    address: RedisAddress
    mode: str
    #: Stream key, channel or key prefix: a template of ``{topic}`` and ``{connector}``.
    target: str
    stream_length_max: int = 0
    stream_headers: bool = False
    key_ttl_ms: int = 0
    #: The hash holding the last offset written per topic partition (what makes a replay write nothing twice).
    positions_key: str
    start: str = "earliest"
    batch_records: int = 500
    pipeline_depth: int = 8
    checkpoint_interval_ms: int = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisSourceSettings:
    """Copy a Redis Stream (through a consumer group) or a list (through a processing list) into ``topic``."""

    topic: str
    address: RedisAddress
    mode: str
    #: The Stream or list key.
    source_key: str
    group: str = ""
    group_start: str = "0"
    claim_idle_ms: int = 60_000
    #: The processing list (list mode): a template of ``{list}``, ``{connector}`` and ``{task}``.
    processing_list: str = ""
    key_field: str | None = None
    value_field: str | None = None
    batch_records: int = 500
    block_ms: int = 1000
    checkpoint_interval_ms: int = 1000
    #: An entry too large for one batch of the topic: ``fail`` the task (it stays in Redis) or ``skip`` it.
    oversized: str = "fail"


def parse_sink(name: str, reader: SettingsReader) -> RedisSinkSettings:
    """The ``redis-sink`` keys (see docs/connectors.md)."""
    topics = reader.names("topics")
    address = redis_address(reader)
    mode = reader.choice("redis.mode", SINK_MODES, "stream")
    stream_length_max, stream_headers, key_ttl_ms = 0, False, 0
    if mode == "stream":
        target = reader.template("redis.stream", "{topic}", ("topic", "connector"))
        stream_length_max = reader.integer("redis.stream.maxlen", 1_000_000, minimum=0, maximum=2**62)
        stream_headers = reader.boolean("redis.stream.headers", False)
    elif mode == "pubsub":
        target = reader.template("redis.channel", "{topic}", ("topic", "connector"))
    else:
        target = reader.template("redis.key.prefix", "{topic}:", ("topic", "connector"))
        key_ttl_ms = reader.integer("redis.key.ttl.ms", 0, minimum=0, maximum=2**62)
    return RedisSinkSettings(
        topics=topics, address=address, mode=mode, target=target, stream_length_max=stream_length_max,
        stream_headers=stream_headers, key_ttl_ms=key_ttl_ms,
        positions_key=fill(reader.template("redis.positions.key", "mqbroker:connector:{connector}:positions",
                                           ("connector",)), connector=name),
        start=reader.choice("start", START_POSITIONS, "earliest"),
        batch_records=reader.integer("batch.records", 500, minimum=1, maximum=10_000),
        pipeline_depth=reader.integer("redis.pipeline.depth", 8, minimum=1, maximum=64),
        checkpoint_interval_ms=reader.integer("checkpoint.interval.ms", 1000, minimum=10, maximum=3_600_000),
    )


def parse_source(name: str, reader: SettingsReader) -> RedisSourceSettings:
    """The ``redis-source`` keys (see docs/connectors.md)."""
    topic = reader.text("topic")
    address = redis_address(reader)
    mode = reader.choice("redis.mode", SOURCE_MODES, "stream")
    common = {
        "batch_records": reader.integer("batch.records", 500, minimum=1, maximum=10_000),
        "block_ms": reader.integer("redis.block.ms", 1000, minimum=1, maximum=BLOCK_MS_MAX),
        "checkpoint_interval_ms": reader.integer("checkpoint.interval.ms", 1000, minimum=10, maximum=3_600_000),
        "oversized": reader.choice("oversized", ("fail", "skip"), "fail"),
    }
    if mode == "stream":
        return RedisSourceSettings(
            topic=topic, address=address, mode=mode, source_key=reader.text("redis.stream"),
            group=fill(reader.template("redis.group", "mqbroker-{connector}", ("connector",)), connector=name),
            group_start=reader.choice("redis.group.start", ("0", "$"), "0"),
            claim_idle_ms=reader.integer("redis.claim.idle.ms", 60_000, minimum=0, maximum=2**31),
            key_field=reader.text("key.field", None), value_field=reader.text("value.field", None), **common,
        )
    source_key = reader.text("redis.list")
    processing = reader.template("redis.processing.list", "{list}:processing:{connector}:{task}",
                                 ("list", "connector", "task"))
    return RedisSourceSettings(
        topic=topic, address=address, mode=mode, source_key=source_key,
        processing_list=processing, **common,
    )
