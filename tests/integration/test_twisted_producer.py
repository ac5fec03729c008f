"""``TwistedProducer.send`` on its direct path and off it: sends waiting for metadata, full batches, refused records."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import gatherResults

from mqbroker.client import Admin
from mqbroker.client.twisted import TwistedProducer
from tests.integration.brokerprocess import BrokerProcess


@pytest_twisted.ensureDeferred
async def test_sends_waiting_for_a_topic_share_one_metadata_request(shared_broker: BrokerProcess) -> None:
    producer = TwistedProducer(reactor, shared_broker.bootstrap, acks=1)
    written = await gatherResults([producer.send("twisted-many-waiting", b"%d" % number) for number in range(500)])
    await producer.close()
    assert sorted(metadata.offset for metadata in written) == list(range(500))


@pytest_twisted.ensureDeferred
async def test_keyless_records_move_to_another_partition_when_their_batch_fills(shared_broker: BrokerProcess) -> None:
    with Admin(shared_broker.bootstrap) as admin:
        admin.create_topics(["twisted-sticky"], partitions=4)
    producer = TwistedProducer(reactor, shared_broker.bootstrap, acks=1, batch_size=1_024)
    await producer.send("twisted-sticky", b"first")
    written = await gatherResults([producer.send("twisted-sticky", b"v" * 100) for _ in range(200)])
    await producer.close()
    assert len({metadata.partition for metadata in written}) > 1


@pytest_twisted.ensureDeferred
async def test_a_record_it_cannot_encode_fails_its_deferred_not_the_caller(shared_broker: BrokerProcess) -> None:
    producer = TwistedProducer(reactor, shared_broker.bootstrap, acks=1)
    await producer.send("twisted-refused", b"first")
    refused = producer.send("twisted-refused", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await refused
    assert (await producer.send("twisted-refused", b"after")).offset == 1
    await producer.close()
