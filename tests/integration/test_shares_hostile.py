"""Hostile share-group requests against a real broker (hypothesis): well-framed ShareGroupHeartbeat,
ShareFetch, ShareAcknowledge, ShareGroupDescribe and share-group administration requests with any field
values, aimed at a live group with a real member. Each gets an answer (a typed error where it must be
refused) on a connection that stays open, and an honest share consumer is served afterwards."""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqbroker.client import ShareConsumer
from mqbroker.protocols.native import share_messages as share
from mqbroker.protocols.native.codec import ErrorResponse
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.nativewire import RawNativeConnection
from tests.integration.share_support import create_group, create_topic, produce
from tests.unit.protocols.native.strategies import messages

GROUP = "hostile-target"
TOPIC = "hostile-topic"
REQUEST_TYPES = (share.ShareGroupHeartbeatRequest, share.ShareFetchRequest, share.ShareAcknowledgeRequest,
                 share.ShareGroupDescribeRequest, share.CreateShareGroupRequest, share.AlterShareGroupRequest,
                 share.DeleteShareGroupRequest, share.ListShareGroupsRequest)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    """A broker with a share group, records in it and a joined member (its id)."""
    process = BrokerProcess(data_dir=tmp_path_factory.mktemp("shares-hostile") / "data")
    process.start()
    try:
        create_topic(process.bootstrap, TOPIC, partitions=2)
        create_group(process.bootstrap, GROUP, [TOPIC], lease_ms="60000")
        produce(process.bootstrap, TOPIC, (b"v%d" % n for n in range(50)))
        raw = RawNativeConnection(process.ports["native"])
        joined = raw.call(share.ShareGroupHeartbeatRequest(group_id=GROUP, subscribed_topic_names=(TOPIC,)))
        raw.close()
        yield process, joined.member_id
    finally:
        process.kill()


def _aimed(request: Any, member_id: str, data: st.DataObject) -> Any:
    """Point a drawn request at the live group and member half of the time; keep long-polls short."""
    changes: dict[str, Any] = {}
    fields = {field.name for field in dataclasses.fields(request)}
    if "group_id" in fields and data.draw(st.booleans()):
        changes["group_id"] = GROUP
    if "member_id" in fields and data.draw(st.booleans()):
        changes["member_id"] = member_id
    if "max_wait_ms" in fields:
        changes["max_wait_ms"] = data.draw(st.integers(-5, 50))
    return dataclasses.replace(request, **changes)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hostile_share_requests_get_answers_and_the_broker_keeps_serving(target: tuple[BrokerProcess, str],
                                                                        data: st.DataObject) -> None:
    broker, member_id = target
    raw = RawNativeConnection(broker.ports["native"], timeout_s=20)
    try:
        for _ in range(3):
            request_type = data.draw(st.sampled_from(REQUEST_TYPES))
            request = _aimed(data.draw(messages(request_type)), member_id, data)
            answer = raw.call(request)  # an answer, on a connection that stays open
            if isinstance(answer, ErrorResponse):
                assert answer.error_code != 0 and answer.error_message
    finally:
        raw.close()
    assert broker.process is not None and broker.process.poll() is None


def test_an_honest_consumer_is_served_after_the_attacks(target: tuple[BrokerProcess, str]) -> None:
    broker, _ = target
    create_topic(broker.bootstrap, "after-attacks", partitions=1)
    create_group(broker.bootstrap, "honest", ["after-attacks"])
    produce(broker.bootstrap, "after-attacks", [b"still here"])
    with ShareConsumer(broker.bootstrap, group_id="honest", topics=["after-attacks"], fetch_wait_ms=200) as consumer:
        got: list = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got = consumer.poll(0.5)
        assert [m.value for m in got] == [b"still here"]
        consumer.ack(got[0])
        assert [o.error for o in consumer.commit()] == [None]
    assert "Unhandled" not in broker.log_text() and "Traceback" not in broker.log_text(), \
        pathlib.Path(str(broker.log_path)).name
