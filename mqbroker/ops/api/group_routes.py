"""Admin API: consumer groups (members, assignments, committed offsets and lag; reset offsets; delete)."""

from __future__ import annotations

from typing import Any

from mqbroker import errors
from mqbroker.groups.model import TopicPartition
from mqbroker.limits import group_id_length_max
from mqbroker.ops.api.routing import ApiCall, ApiError, Route, gathered, path_parameter
from mqbroker.ops.api.schemas import array_of, printable_name, ref
from mqbroker.ops.api.topic_routes import described_topic

TAG = "groups"
GROUP = path_parameter("group", "the group id", printable_name(group_id_length_max))


async def _latest_or_none(call: ApiCall, partition: TopicPartition) -> int | None:
    try:
        return await call.operations.latest_offset(call.principal, partition.topic, partition.partition)
    except errors.BrokerError:
        return None  # a deleted topic, an offline partition: no lag to show


async def offsets_with_lag(call: ApiCall, group_id: str) -> dict[str, Any]:
    """A group's committed offsets, each with its partition's high watermark and the lag between them."""
    committed = await call.operations.committed_offsets(call.principal, group_id)
    partitions = sorted(committed)
    latest = await gathered(_latest_or_none(call, p) for p in partitions)
    offsets = []
    for partition, end in zip(partitions, latest):
        lag = None if end is None else max(0, end - committed[partition])
        offsets.append({"topic": partition.topic, "partition": partition.partition,
                        "committed_offset": committed[partition], "latest_offset": end, "lag": lag})
    return {"group_id": group_id, "offsets": offsets, "total_lag": sum(o["lag"] or 0 for o in offsets)}


async def list_groups(call: ApiCall) -> list[dict[str, Any]]:
    """The consumer groups this broker coordinates that the principal may describe."""
    return [{"group_id": group.group_id, "state": group.state.value, "protocol_type": group.protocol_type}
            for group in await call.operations.list_groups(call.principal)]


async def describe_group(call: ApiCall) -> dict[str, Any]:
    """A group's state, members with their assignments, committed offsets and lag."""
    group_id = call.path["group"]
    described = await call.operations.describe_group(call.principal, group_id)
    offsets = await offsets_with_lag(call, group_id)
    if described.state.value == "Dead" and not offsets["offsets"]:
        raise errors.GroupIdNotFoundError(f"group {group_id!r} does not exist (no members, no committed offsets)")
    members = [{"member_id": member.member_id, "group_instance_id": member.group_instance_id,
                "client_id": member.client_id, "client_host": member.client_host,
                "assignment": [{"topic": p.topic, "partition": p.partition} for p in sorted(member.assignment)]}
               for member in described.members]
    return {"group_id": group_id, "state": described.state.value, "protocol_type": described.protocol_type,
            "assignor": described.assignor, "generation_id": described.generation_id, "members": members,
            "offsets": offsets["offsets"], "total_lag": offsets["total_lag"]}


async def group_offsets(call: ApiCall) -> dict[str, Any]:
    """A group's committed offsets and lag."""
    return await offsets_with_lag(call, call.path["group"])


async def delete_group(call: ApiCall) -> None:
    """Delete a group without members, and its committed offsets."""
    await call.operations.delete_group(call.principal, call.path["group"])


async def _target(call: ApiCall, partition: TopicPartition) -> int:
    reset, operations = call.body, call.operations
    if reset["to"] == "earliest":
        return await operations.earliest_offset(call.principal, partition.topic, partition.partition)
    if reset["to"] == "latest":
        return await operations.latest_offset(call.principal, partition.topic, partition.partition)
    if reset["to"] == "offset":
        if "offset" not in reset:
            raise ApiError(400, "INVALID_REQUEST", "to=offset needs an offset")
        earliest = await operations.earliest_offset(call.principal, partition.topic, partition.partition)
        latest = await operations.latest_offset(call.principal, partition.topic, partition.partition)
        return min(max(reset["offset"], earliest), latest)  # as kafka-consumer-groups.sh: clamped to the log
    if "timestamp_ms" not in reset:
        raise ApiError(400, "INVALID_REQUEST", "to=timestamp needs a timestamp_ms")
    found = await operations.offset_for_time(call.principal, partition.topic, partition.partition, reset["timestamp_ms"])
    if found < 0:  # nothing at or after that time: the end
        return await operations.latest_offset(call.principal, partition.topic, partition.partition)
    return found


async def reset_offsets(call: ApiCall) -> dict[str, Any]:
    """Move a group's committed offsets (earliest, latest, an offset, a time); the group must have no members."""
    group_id = call.path["group"]
    described = await call.operations.describe_group(call.principal, group_id)
    if described.members:
        raise ApiError(409, "GROUP_NOT_EMPTY", f"group {group_id!r} has {len(described.members)} active member(s); "
                                               "stop its consumers before resetting its offsets")
    committed = await call.operations.committed_offsets(call.principal, group_id)
    topic = call.body.get("topic")
    if topic is not None:
        metadata = await described_topic(call, topic)
        partitions = [TopicPartition(topic, p.partition) for p in metadata.partitions]
    else:
        partitions = sorted(committed)
    if not partitions:
        raise ApiError(400, "INVALID_REQUEST", f"group {group_id!r} has no committed offsets; name a topic to reset")
    targets = await gathered(_target(call, p) for p in partitions)
    offsets = dict(zip(partitions, targets))
    if not call.body.get("dry_run", False):
        await call.operations.commit_offsets(call.principal, group_id, offsets)
    return await _preview(call, group_id, offsets)


async def _preview(call: ApiCall, group_id: str, offsets: dict[TopicPartition, int]) -> dict[str, Any]:
    latest = await gathered(_latest_or_none(call, p) for p in offsets)
    rows = [{"topic": p.topic, "partition": p.partition, "committed_offset": offset, "latest_offset": end,
             "lag": None if end is None else max(0, end - offset)}
            for (p, offset), end in zip(offsets.items(), latest)]
    return {"group_id": group_id, "offsets": rows, "total_lag": sum(row["lag"] or 0 for row in rows)}


ROUTES = (
    Route(method="GET", path="/api/v1/groups", operation_id="listGroups", tag=TAG, handler=list_groups,
          summary="Consumer groups coordinated by this broker", response=array_of("GroupSummary")),
    Route(method="GET", path="/api/v1/groups/{group}", operation_id="describeGroup", tag=TAG, handler=describe_group,
          summary="A group's members, assignments, committed offsets and lag", parameters=(GROUP,),
          response=ref("Group"), error_statuses=(404,)),
    Route(method="DELETE", path="/api/v1/groups/{group}", operation_id="deleteGroup", tag=TAG, handler=delete_group,
          summary="Delete a group without members and its offsets", parameters=(GROUP,), error_statuses=(404, 409)),
    Route(method="GET", path="/api/v1/groups/{group}/offsets", operation_id="describeGroupOffsets", tag=TAG,
          handler=group_offsets, summary="A group's committed offsets and lag per partition", parameters=(GROUP,),
          response=ref("GroupOffsets")),
    Route(method="POST", path="/api/v1/groups/{group}/offsets/reset", operation_id="resetGroupOffsets", tag=TAG,
          handler=reset_offsets, summary="Reset a group's offsets to the earliest, the latest, an offset or a time",
          parameters=(GROUP,), body=ref("OffsetReset"), response=ref("GroupOffsets"), error_statuses=(404, 409)),
)
