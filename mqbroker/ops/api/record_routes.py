"""Admin API: the message browser, recent records of a topic by offset or time, decoded for reading.

Records are read with the broker's fetch (at each partition's leader, committed records only,
no waiting) and decoded here, a bounded page at a time: this is an operator's read path,
never the produce or fetch path.
"""

from __future__ import annotations

import base64
from typing import Any

from mqbroker import errors
from mqbroker.limits import http_browse_fetch_bytes_max, http_browse_records_max, http_browse_value_chars_max
from mqbroker.ops.api.routing import ApiCall, Route, gathered, query_parameter
from mqbroker.ops.api.schemas import ref
from mqbroker.ops.api.topic_routes import TOPIC, described_topic
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches

TAG = "records"
LIMIT_DEFAULT = 50


def text_of(data: bytes | None) -> dict[str, Any] | None:
    """A key, value or header as UTF-8 text when it is text, else base64; cut at the browser's bound."""
    if data is None:
        return None
    cut = data[:http_browse_value_chars_max]
    try:
        return {"text": cut.decode("utf-8"), "base64": None, "truncated": len(cut) < len(data)}
    except UnicodeDecodeError:
        pass
    try:  # a multi-byte character cut in two at the bound
        return {"text": data[:http_browse_value_chars_max + 3].decode("utf-8")[:http_browse_value_chars_max],
                "base64": None, "truncated": True}
    except UnicodeDecodeError:
        return {"text": None, "base64": base64.b64encode(cut).decode("ascii"), "truncated": len(cut) < len(data)}


def decoded_records(data: bytes, partition: int, start_offset: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` records at or after ``start_offset`` from whole batches (control batches skipped)."""
    found: list[dict[str, Any]] = []
    view = memoryview(data)
    try:
        for position, header in iter_batches(view):
            if header.is_control:
                continue
            for record in decode_records(view[position:position + header.size_bytes]):
                if record.offset < start_offset:
                    continue
                found.append({"partition": partition, "offset": record.offset, "timestamp_ms": record.timestamp_ms,
                              "key": text_of(record.key), "value": text_of(record.value),
                              "headers": [{"key": key, "value": text_of(value)} for key, value in record.headers]})
                if len(found) >= limit:
                    return found
    except CorruptRecordError as error:
        raise errors.CorruptMessageError(f"partition {partition} holds a batch that does not decode: {error}") from None
    return found


async def _start_offset(call: ApiCall, topic: str, partition: int, limit: int) -> int | None:
    """Where to start reading a partition (None: nothing to read): the asked offset (at least the log start),
    the first at the asked time, or ``limit`` before the end."""
    operations = call.operations
    if "timestamp_ms" in call.query:
        found = await operations.offset_for_time(call.principal, topic, partition, call.query["timestamp_ms"])
        return None if found < 0 else found
    latest = await operations.latest_offset(call.principal, topic, partition)
    earliest = await operations.earliest_offset(call.principal, topic, partition)
    if "offset" not in call.query:
        return max(earliest, latest - limit)
    if call.query["offset"] >= latest:
        return None  # nothing there yet
    return max(earliest, call.query["offset"])  # records below the log start are gone: show the first ones left


async def _read_partition(call: ApiCall, topic: str, partition: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
    start = await _start_offset(call, topic, partition, limit)
    if start is None:
        return partition, []
    result = await call.operations.read(call.principal, topic, partition, start, http_browse_fetch_bytes_max)
    return partition, decoded_records(result.records, partition, start, limit)


async def browse(call: ApiCall) -> dict[str, Any]:
    """Records of one partition or of all, from an offset, from a time, or the most recent ones."""
    topic = await described_topic(call, call.path["topic"])
    limit = call.query.get("limit", LIMIT_DEFAULT)
    if "partition" in call.query:
        if call.query["partition"] >= len(topic.partitions):
            raise errors.UnknownTopicOrPartitionError(f"topic {topic.name!r} has {len(topic.partitions)} partitions")
        partitions = [call.query["partition"]]
    else:
        partitions = list(range(len(topic.partitions)))
    read = await gathered(_read_partition(call, topic.name, partition, limit) for partition in partitions)
    records = sorted((record for _, found in read for record in found),
                     key=lambda record: (record["timestamp_ms"], record["partition"], record["offset"]))
    records = records[:limit] if ("offset" in call.query or "timestamp_ms" in call.query) else records[-limit:]
    next_offsets = {}
    for partition, found in read:
        shown = [record["offset"] for record in records if record["partition"] == partition]
        if shown:
            next_offsets[str(partition)] = max(shown) + 1
    return {"topic": topic.name, "records": records, "next_offsets": next_offsets}


ROUTES = (
    Route(method="GET", path="/api/v1/topics/{topic}/records", operation_id="browseRecords", tag=TAG, handler=browse,
          summary="Recent records of a topic, or from an offset or a time, decoded as UTF-8 where they are text",
          response=ref("Records"), error_statuses=(404,),
          parameters=(
              TOPIC,
              query_parameter("partition", "only this partition (default: every partition)",
                              {"type": "integer", "minimum": 0}),
              query_parameter("offset", "start at this offset (with one partition it is exact)",
                              {"type": "integer", "minimum": 0}),
              query_parameter("timestamp_ms", "start at the first record at or after this time",
                              {"type": "integer", "minimum": 0}),
              query_parameter("limit", f"most records returned (default {LIMIT_DEFAULT})",
                              {"type": "integer", "minimum": 1, "maximum": http_browse_records_max}),
          )),
)
