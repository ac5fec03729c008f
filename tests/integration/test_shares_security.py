"""Share groups on a secured broker (TLS, SCRAM, ACLs, no anonymous access).

The broker writes ``__share_group_state`` and the dead-letter topics as its own principal
(``Service:shares``), which clients cannot be: a client may not write the state topic, and may not
name a dead-letter topic it could not write itself. With those checks in place an authorized
consumer's group works: its verdicts are stored (they survive a kill -9), and a rejected record
reaches the dead-letter topic.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator

import pytest

from mqbroker.client import Consumer, Producer, ShareConsumer
from mqbroker.client.share_admin import ShareGroupAdmin
from mqbroker.errors import InvalidTopicError, TopicAuthorizationError
from mqbroker.records import dead_letters
from mqbroker.shares.state_records import STATE_TOPIC
from tests.integration.security_support import SecuredBroker, acl, start_secured_broker


@pytest.fixture
def secured(tmp_path: pathlib.Path) -> Iterator[SecuredBroker]:
    """alice may read ``orders``, write ``orders.dlq`` and use group ``alice-billing`` (and holds an ACL on the
    state topic); bob the same without the dead-letter topic."""
    for broker in start_secured_broker(tmp_path):
        with broker.admin() as admin:
            admin.create_topics(["orders", "orders.dlq"], partitions=1)
            admin.create_acls([
                acl("User:alice", "read", "topic", "orders"), acl("User:alice", "write", "topic", "orders.dlq"),
                acl("User:alice", "all", "group", "alice-billing"),
                acl("User:bob", "read", "topic", "orders"), acl("User:bob", "all", "group", "bob-billing"),
                acl("User:alice", "all", "topic", STATE_TOPIC),  # an ACL cannot open the broker's own topic
            ])
        yield broker


def test_clients_cannot_reach_the_broker_s_writes_and_an_authorized_group_works(secured: SecuredBroker) -> None:
    bootstrap = secured.tls_bootstrap
    with ShareGroupAdmin(bootstrap, security=secured.security("bob")) as bob:
        with pytest.raises(TopicAuthorizationError, match="orders.dlq"):
            bob.create("bob-billing", ["orders"], {"dead.letter.topic": "orders.dlq"})
        with pytest.raises(InvalidTopicError):
            bob.create("bob-billing", ["orders"], {"dead.letter.topic": STATE_TOPIC})
        bob.create("bob-billing", ["orders"], {})
        with pytest.raises(TopicAuthorizationError, match="orders.dlq"):
            bob.alter("bob-billing", set_configs={"dead.letter.topic": "orders.dlq"})
    with Producer(bootstrap, acks="all", security=secured.security("alice")) as producer:
        with pytest.raises(InvalidTopicError):
            producer.send(STATE_TOPIC, b"forged state", key=b"\x00\x02").result(20)

    with ShareGroupAdmin(bootstrap, security=secured.security("alice")) as alice:
        alice.create("alice-billing", ["orders"], {"dead.letter.topic": "orders.dlq", "auto.offset.reset": "earliest"})
    admin_security = secured.security(certificate="admin")
    with Producer(bootstrap, acks="all", security=admin_security) as producer:
        for n in range(5):
            producer.send("orders", b"order-%d" % n)
    alice_options = dict(group_id="alice-billing", topics=["orders"], fetch_wait_ms=200,
                         security=secured.security("alice"))
    with ShareConsumer(bootstrap, **alice_options) as consumer:  # type: ignore[arg-type]
        got: list = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            got += consumer.poll(0.5)
        assert [m.offset for m in got] == list(range(5))
        for message in got:
            (consumer.reject(message, error="unreadable") if message.offset == 2 else consumer.ack(message))
        assert {o.error for o in consumer.commit()} == {None}

    with Consumer(bootstrap, topics=["orders.dlq"], auto_offset_reset="earliest", security=admin_security) as reader:
        letters: list = []
        deadline = time.monotonic() + 20
        while not letters and time.monotonic() < deadline:
            letters += reader.poll(0.5)
    assert [(letter.value, dict(letter.headers)[dead_letters.HEADER_GROUP]) for letter in letters] == [
        (b"order-2", b"alice-billing")]

    secured.process.kill()  # the verdicts were written to __share_group_state as the broker's own
    secured.process.restart()
    with ShareConsumer(bootstrap, **alice_options) as consumer:  # type: ignore[arg-type]
        assert consumer.poll(2.0) == []
    with ShareGroupAdmin(bootstrap, security=secured.security("alice")) as alice:
        partition = alice.describe("alice-billing").partitions[0]
    assert (partition.start_offset, partition.lag) == (5, 0)
