"""Admin API: the message browser, recent records of a topic by offset or time, decoded for reading.

Records are read with the broker's fetch (at each partition's leader, committed records only,
no waiting) and decoded here, a bounded page at a time: this is an operator's read path,
never the produce or fetch path. A batch whose CRC or records do not decode (see
``mqbroker.records.readable``) is listed under ``unreadable`` with its offsets and the page goes
on after it, as the broker's own readers do.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from mqbroker import errors
from mqbroker.limits import (
    http_browse_fetch_bytes_max,
    http_browse_first_read_bytes,
    http_browse_records_max,
    http_browse_value_chars_max,
)
from mqbroker.ops.api.routing import ApiCall, Route, gathered, query_parameter
from mqbroker.ops.api.schemas import ref
from mqbroker.ops.api.topic_routes import TOPIC, described_topic
from mqbroker.records.readable import UnreadableBatch, next_offset_after, readable_records

TAG = "records"
LIMIT_DEFAULT = 50


def text_of(data: bytes | None) -> dict[str, Any] | None:
    """A key, value or header as UTF-8 text when it is text, else base64; cut at the browser's bound (in bytes)."""
    if data is None:
        return None
    cut = data[:http_browse_value_chars_max]
    try:
        text = cut.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.reason != "unexpected end of data" or len(cut) == len(data):
            return {"text": None, "base64": base64.b64encode(cut).decode("ascii"), "truncated": len(cut) < len(data)}
        cut = cut[:error.start]  # a multi-byte character cut in two at the bound
        text = cut.decode("utf-8")
    return {"text": text, "base64": None, "truncated": len(cut) < len(data)}


@dataclass(slots=True, kw_only=True)
class PartitionPage:
    """What one partition's read gave: its decoded records and the batches that did not decode."""

    partition: int
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[UnreadableBatch] = field(default_factory=list)


def unreadable_of(batch: UnreadableBatch) -> dict[str, Any]:
    """A skipped batch as the API shows it: where it is and why it does not decode."""
    return {"partition": batch.partition, "first_offset": batch.first_offset, "last_offset": batch.last_offset,
            "error": str(batch.error)}


def decoded_records(data: bytes, topic: str, partition: int, start_offset: int, limit: int,
                    skipped: list[UnreadableBatch]) -> list[dict[str, Any]]:
    """Up to ``limit`` records at or after ``start_offset`` from whole batches (control batches passed over,
    undecodable ones appended to ``skipped``)."""
    found: list[dict[str, Any]] = []
    for record in readable_records(data, start_offset, topic=topic, partition=partition, skipped=skipped.append):
        found.append({"partition": partition, "offset": record.offset, "timestamp_ms": record.timestamp_ms,
                      "key": text_of(record.key), "value": text_of(record.value),
                      "headers": [{"key": key, "value": text_of(value)} for key, value in record.headers]})
        if len(found) >= limit:
            break
    return found


def next_offset(shown: list[int], read_all: bool, skipped: list[UnreadableBatch]) -> int | None:
    """Where a partition's next page starts (None: nothing shown or skipped): after its last record shown, and past
    its unreadable batches when every record read from it is shown (none lies between them and the page's end)."""
    ends = [offset + 1 for offset in shown[-1:]]
    if read_all:
        ends += [batch.last_offset + 1 for batch in skipped]
    return max(ends, default=None)


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


async def _read_partition(call: ApiCall, topic: str, partition: int, limit: int) -> PartitionPage:
    """Up to ``limit`` records from where the query says: reads of growing size until the page is full, the
    partition's end is reached or ``http_browse_fetch_bytes_max`` bytes were read."""
    page = PartitionPage(partition=partition)
    offset = await _start_offset(call, topic, partition, limit)
    read_bytes, budget = 0, http_browse_first_read_bytes
    while offset is not None and len(page.records) < limit and read_bytes < http_browse_fetch_bytes_max:
        result = await call.operations.read(call.principal, topic, partition, offset, budget)
        if not result.records:
            break
        page.records += decoded_records(result.records, topic, partition, offset, limit - len(page.records),
                                        page.skipped)
        read_bytes += len(result.records)
        offset = next_offset_after(result.records, offset)
        if offset >= result.high_watermark:
            break
        budget = min(2 * budget, http_browse_fetch_bytes_max - read_bytes)
    return page


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
    pages = await gathered(_read_partition(call, topic.name, partition, limit) for partition in partitions)
    records = sorted((record for page in pages for record in page.records),
                     key=lambda record: (record["timestamp_ms"], record["partition"], record["offset"]))
    records = records[:limit] if ("offset" in call.query or "timestamp_ms" in call.query) else records[-limit:]
    next_offsets = {}
    for page in pages:
        shown = sorted(record["offset"] for record in records if record["partition"] == page.partition)
        following = next_offset(shown, len(shown) == len(page.records), page.skipped)
        if following is not None:
            next_offsets[str(page.partition)] = following
    return {"topic": topic.name, "records": records, "next_offsets": next_offsets,
            "unreadable": [unreadable_of(batch) for page in pages for batch in page.skipped]}


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
