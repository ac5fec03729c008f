"""Admin API: share groups (queues on the log) and push subscriptions (share groups the broker consumes).

The same operations as ``mqbroker share-groups`` and ``mqbroker subscriptions``: each call is
answered by the group's host, whichever broker it arrives at. A push subscription is a share
group with ``push.*`` configs; its routes show and change only such groups. A share group's
offsets cannot be reset: the broker has no such operation (it keeps per-record state, not one
offset); delete the group and create it again with ``auto.offset.reset``.
"""

from __future__ import annotations

import secrets
from typing import Any

from mqbroker import errors
from mqbroker.limits import group_id_length_max
from mqbroker.ops.api.routing import ApiCall, Route, path_parameter
from mqbroker.ops.api.schemas import array_of, printable_name, ref
from mqbroker.shares import messages as share_messages
from mqbroker.shares.settings import SECRET_BYTES, push_configs

SHARE_TAG = "share-groups"
SUBSCRIPTION_TAG = "subscriptions"
GROUP = path_parameter("group", "the share group id", printable_name(group_id_length_max))
SUBSCRIPTION = path_parameter("name", "the push subscription's name", printable_name(group_id_length_max))
#: NewSubscription fields passed to ``push_configs`` under the same name.
_PUSH_OPTIONS = ("max_outstanding", "ack_deadline_ms", "max_delivery_attempts", "rate_per_second",
                 "batch_max_messages")


def share_group_document(group: share_messages.ShareGroupDescription) -> dict[str, Any]:
    """A described share group as the API shows it: members, partitions with their counts, totals, dead letters."""
    partitions = [{"topic": p.topic, "partition": p.partition, "start_offset": p.stats.start_offset,
                   "end_offset": p.stats.end_offset, "in_flight": p.stats.acquired, "available": p.stats.available,
                   "dead_lettering": p.stats.dead_lettering, "due": p.stats.due, "scheduled": p.scheduled,
                   "lag": p.lag, "delivery_counts": {str(count): records for count, records
                                                     in sorted(p.stats.delivery_counts.items())}}
                  for p in group.partitions]
    members = [{"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                "topics": list(m.topics), "acquired": m.acquired} for m in group.members]
    return {"group_id": group.group_id, "topics": list(group.topics), "configs": dict(group.configs),
            "push_endpoint": group.configs.get("push.endpoint") or None, "members": members,
            "partitions": partitions, "in_flight": sum(p["in_flight"] for p in partitions),
            "lag": sum(p["lag"] for p in partitions), "dead_lettered": group.dead_lettered,
            "dead_letter_depth": None if group.dead_letter_depth < 0 else group.dead_letter_depth}


async def list_share_groups(call: ApiCall) -> list[dict[str, Any]]:
    """Every share group of the cluster the principal may describe (push subscriptions included)."""
    return [{"group_id": g.group_id, "topics": list(g.topics), "members": g.members,
             "push_endpoint": g.push_endpoint or None} for g in await call.operations.share_groups(call.principal)]


async def describe_share_group(call: ApiCall) -> dict[str, Any]:
    """A share group's members, partitions (in flight, available, delivery counts, lag) and dead letters."""
    return share_group_document(await call.operations.describe_share_group(call.principal, call.path["group"]))


async def create_share_group(call: ApiCall) -> dict[str, Any]:
    """Define a share group over topics; answer with its description."""
    group_id = call.body["group_id"]
    await call.operations.create_share_group(call.principal, group_id, call.body["topics"],
                                             call.body.get("configs", {}))
    return share_group_document(await call.operations.describe_share_group(call.principal, group_id))


async def delete_share_group(call: ApiCall) -> None:
    """Delete a share group without members, with its state and scheduled records."""
    await call.operations.delete_share_group(call.principal, call.path["group"])


async def _subscription(call: ApiCall, name: str) -> share_messages.ShareGroupDescription:
    """The described share group ``name``, which must be a push subscription."""
    group = await call.operations.describe_share_group(call.principal, name)
    if not group.configs.get("push.endpoint"):
        raise errors.ResourceNotFoundError(f"share group {name!r} is not a push subscription (it has no "
                                           f"push.endpoint); see /api/v1/share-groups/{name}")
    return group


async def list_subscriptions(call: ApiCall) -> list[dict[str, Any]]:
    """Every push subscription the principal may describe."""
    return [{"name": g.group_id, "topics": list(g.topics), "endpoint": g.push_endpoint}
            for g in await call.operations.share_groups(call.principal) if g.push_endpoint]


async def describe_subscription(call: ApiCall) -> dict[str, Any]:
    """A push subscription as a share group: records in flight, delivery counts, dead letters."""
    return share_group_document(await _subscription(call, call.path["name"]))


async def create_subscription(call: ApiCall) -> dict[str, Any]:
    """Create a push subscription; the answer carries its signing secret, which is never shown again."""
    body = call.body
    secret = body.get("secret") or secrets.token_hex(SECRET_BYTES)
    configs = push_configs(endpoint=body["endpoint"], secret=secret, filter_text=body.get("filter", ""),
                           dead_letter_topic=body.get("dead_letter_topic", ""), start=body.get("start"),
                           **{option: body.get(option) for option in _PUSH_OPTIONS})
    await call.operations.create_share_group(call.principal, body["name"], [body["topic"]], configs)
    return {"name": body["name"], "topics": [body["topic"]], "endpoint": body["endpoint"], "secret": secret}


async def delete_subscription(call: ApiCall) -> None:
    """Delete a push subscription (the broker stops pushing; its records' state goes)."""
    name = call.path["name"]
    await _subscription(call, name)
    await call.operations.delete_share_group(call.principal, name)


ROUTES = (
    Route(method="GET", path="/api/v1/share-groups", operation_id="listShareGroups", tag=SHARE_TAG,
          handler=list_share_groups, summary="Share groups of the cluster (each asked of its host)",
          response=array_of("ShareGroupSummary")),
    Route(method="POST", path="/api/v1/share-groups", operation_id="createShareGroup", tag=SHARE_TAG,
          handler=create_share_group, summary="Define a share group over topics", body=ref("NewShareGroup"),
          response=ref("ShareGroup"), status=201, error_statuses=(404, 409)),
    Route(method="GET", path="/api/v1/share-groups/{group}", operation_id="describeShareGroup", tag=SHARE_TAG,
          handler=describe_share_group, parameters=(GROUP,), response=ref("ShareGroup"), error_statuses=(404,),
          summary="A share group's members, in-flight and available records, delivery counts, lag and dead letters"),
    Route(method="DELETE", path="/api/v1/share-groups/{group}", operation_id="deleteShareGroup", tag=SHARE_TAG,
          handler=delete_share_group, summary="Delete a share group without members, with its state",
          parameters=(GROUP,), error_statuses=(404, 409)),
    Route(method="GET", path="/api/v1/subscriptions", operation_id="listSubscriptions", tag=SUBSCRIPTION_TAG,
          handler=list_subscriptions, summary="Push subscriptions of the cluster", response=array_of("Subscription")),
    Route(method="POST", path="/api/v1/subscriptions", operation_id="createSubscription", tag=SUBSCRIPTION_TAG,
          handler=create_subscription, summary="Create a push subscription (the answer shows its signing secret once)",
          body=ref("NewSubscription"), response=ref("CreatedSubscription"), status=201, error_statuses=(404, 409)),
    Route(method="GET", path="/api/v1/subscriptions/{name}", operation_id="describeSubscription",
          tag=SUBSCRIPTION_TAG, handler=describe_subscription, parameters=(SUBSCRIPTION,), response=ref("ShareGroup"),
          summary="A push subscription's records in flight, delivery counts and dead letters", error_statuses=(404,)),
    Route(method="DELETE", path="/api/v1/subscriptions/{name}", operation_id="deleteSubscription",
          tag=SUBSCRIPTION_TAG, handler=delete_subscription, summary="Delete a push subscription",
          parameters=(SUBSCRIPTION,), error_statuses=(404, 409)),
)
