"""The share-group and push-subscription route handlers over a fake ``AdminOperations``, and their body schemas."""

from __future__ import annotations

from typing import Any

import pytest

from mqbroker import errors
from mqbroker.model import Principal
from mqbroker.ops.api import share_routes
from mqbroker.ops.api.routing import Schemas
from mqbroker.ops.api.schemas import COMPONENTS, ref
from mqbroker.shares import messages as shares
from mqbroker.shares.partition_values import PartitionStats
from tests.unit.ops.api.handlers import run_handler


def _group(group_id: str, configs: dict[str, str]) -> shares.ShareGroupDescription:
    stats = PartitionStats(start_offset=0, end_offset=10, available=3, acquired=4, dead_lettering=1, due=0,
                           delivery_counts={2: 1, 1: 3})
    partition = shares.SharePartitionDescription(topic="jobs", partition=0, stats=stats, scheduled=2, lag=8)
    return shares.ShareGroupDescription(
        group_id=group_id, topics=("jobs",), configs=configs, partitions=(partition, partition), dead_lettered=5,
        members=(shares.ShareMemberDescription(member_id="m-1", client_id="w", client_host="10.0.0.1",
                                               topics=("jobs",), acquired=4),), dead_letter_depth=-1)


class Operations:
    """The share-group calls of ``AdminOperations``: a dict of groups."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, str]] = {"plain": {}, "hook": {"push.endpoint": "http://h/",
                                                                         "push.secret": "********"}}
        self.deleted: list[str] = []

    async def share_groups(self, principal: Principal) -> list[shares.ShareGroupListing]:
        return [shares.ShareGroupListing(group_id=name, topics=("jobs",), members=1,
                                         push_endpoint=configs.get("push.endpoint", ""))
                for name, configs in self.groups.items()]

    async def describe_share_group(self, principal: Principal, group_id: str) -> shares.ShareGroupDescription:
        if group_id not in self.groups:
            raise errors.GroupIdNotFoundError(f"no share group {group_id!r}")
        return _group(group_id, self.groups[group_id])

    async def create_share_group(self, principal: Principal, group_id: str, topics: Any, configs: Any) -> None:
        self.groups[group_id] = dict(configs)

    async def delete_share_group(self, principal: Principal, group_id: str) -> None:
        self.deleted.append(group_id)


def test_a_description_sums_in_flight_and_lag_and_counts_deliveries_by_count() -> None:
    found = run_handler(share_routes.describe_share_group, Operations(), {"group": "plain"})
    assert found["in_flight"] == 8 and found["lag"] == 16 and found["dead_lettered"] == 5
    assert found["dead_letter_depth"] is None and found["push_endpoint"] is None
    assert found["partitions"][0]["delivery_counts"] == {"1": 3, "2": 1}
    assert found["members"] == [{"member_id": "m-1", "client_id": "w", "client_host": "10.0.0.1",
                                 "topics": ["jobs"], "acquired": 4}]
    assert not Schemas(COMPONENTS).errors_in(found, ref("ShareGroup"))


def test_subscriptions_are_the_share_groups_with_a_push_endpoint() -> None:
    operations = Operations()
    assert run_handler(share_routes.list_subscriptions, operations) == [
        {"name": "hook", "topics": ["jobs"], "endpoint": "http://h/"}]
    with pytest.raises(errors.ResourceNotFoundError, match="not a push subscription"):
        run_handler(share_routes.delete_subscription, operations, {"name": "plain"})
    assert operations.deleted == []
    run_handler(share_routes.delete_subscription, operations, {"name": "hook"})
    assert operations.deleted == ["hook"]


def test_creating_a_subscription_generates_a_secret_and_passes_only_the_options_given() -> None:
    operations = Operations()
    created = run_handler(share_routes.create_subscription, operations, body={
        "name": "paid", "topic": "orders", "endpoint": "https://x/", "filter": 'header.type = "paid"',
        "max_outstanding": 7})
    assert len(created["secret"]) == 64 and created["topics"] == ["orders"]
    assert operations.groups["paid"] == {"push.endpoint": "https://x/", "push.secret": created["secret"],
                                         "push.filter": 'header.type = "paid"', "push.max.outstanding": "7"}
    again = run_handler(share_routes.create_subscription, operations, body={
        "name": "mine", "topic": "orders", "endpoint": "https://x/", "secret": "s" * 16, "start": "earliest"})
    assert again["secret"] == "s" * 16 and operations.groups["mine"]["auto.offset.reset"] == "earliest"


@pytest.mark.parametrize(("body", "problem"), [
    ({"name": "a", "topic": "t", "endpoint": "ftp://h/"}, "endpoint"),
    ({"name": "a", "topic": "t", "endpoint": "http://h/", "max_outstanding": 0}, "max_outstanding"),
    ({"name": "a", "topic": "t", "endpoint": "http://h/", "secret": "short"}, "secret"),
    ({"name": "a\u0000b", "topic": "t", "endpoint": "http://h/"}, "name"),
    ({"name": "a", "topic": "t", "endpoint": "http://h/", "extra": 1}, "extra"),
    ({"name": "a", "endpoint": "http://h/"}, "topic"),
])
def test_subscription_bodies_out_of_bounds_are_refused_naming_the_field(body: dict[str, Any], problem: str) -> None:
    found = Schemas(COMPONENTS).errors_in(body, ref("NewSubscription"))
    assert found and problem in " ".join(found)


@pytest.mark.parametrize("body", [
    {"group_id": "", "topics": ["t"]}, {"group_id": "g", "topics": []}, {"group_id": "g" * 256, "topics": ["t"]},
    {"group_id": "g", "topics": ["t"], "configs": {"lease.ms": 5}}, {"group_id": "g"},
])
def test_share_group_bodies_out_of_bounds_are_refused(body: dict[str, Any]) -> None:
    assert Schemas(COMPONENTS).errors_in(body, ref("NewShareGroup"))
