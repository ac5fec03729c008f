"""Who acts for the cluster: replica fetches only from the broker they name, internal topics only for the cluster."""

from __future__ import annotations

import pytest

from mqbroker import errors
from mqbroker.config import build_config
from mqbroker.model import ANONYMOUS, Principal
from mqbroker.security.cluster_principals import ClusterPrincipals, is_internal_topic
from mqbroker.security.inter_broker import broker_principal

ALICE = Principal("User", "alice", "10.0.0.7")
ADMIN = Principal("User", "admin")
FRONT_END = Principal("Service", "mqtt")
SECURED = ClusterPrincipals(super_users=frozenset({"User:admin"}))
OPEN_CLUSTER = ClusterPrincipals(anonymous_peers=True)


def test_only_broker_n_may_fetch_as_replica_n() -> None:
    SECURED.check_replica(broker_principal(2, "10.0.0.2"), 2)
    for principal in (broker_principal(3), ALICE, ADMIN, ANONYMOUS, FRONT_END):
        with pytest.raises(errors.ClusterAuthorizationError, match="only from Broker:2"):
            SECURED.check_replica(principal, 2)


def test_an_unauthenticated_cluster_takes_an_anonymous_peer_for_a_broker_and_nobody_else() -> None:
    OPEN_CLUSTER.check_replica(Principal("User", "ANONYMOUS", "127.0.0.1"), 2)
    with pytest.raises(errors.ClusterAuthorizationError):
        OPEN_CLUSTER.check_replica(ALICE, 2)  # logged in as a user: a client, whatever the cluster


def test_clients_may_not_write_internal_topics() -> None:
    for principal in (ALICE, ADMIN, ANONYMOUS):
        with pytest.raises(errors.InvalidTopicError, match="'__consumer_offsets' is internal"):
            SECURED.check_internal_write(principal, "__consumer_offsets")
    for principal in (broker_principal(1), FRONT_END, Principal("Service", "amqp")):
        SECURED.check_internal_write(principal, "__mqtt_sessions")
    SECURED.check_internal_write(ALICE, "orders")  # the authorizer decides ordinary topics
    OPEN_CLUSTER.check_internal_write(ANONYMOUS, "__mqtt_sessions")  # a forwarded front-end write


def test_internal_topics_are_administered_by_super_users_only() -> None:
    SECURED.check_internal_admin(ADMIN, "__amqp_metadata", "delete")
    SECURED.check_internal_admin(FRONT_END, "__amqp_metadata", "delete")
    for principal in (ALICE, ANONYMOUS):
        with pytest.raises(errors.TopicAuthorizationError, match="only a super user .* may delete it"):
            SECURED.check_internal_admin(principal, "__amqp_metadata", "delete")
    with pytest.raises(errors.TopicAuthorizationError):
        OPEN_CLUSTER.check_internal_admin(ANONYMOUS, "__amqp_metadata", "delete")  # no broker forwards admin calls


def test_anonymous_peers_only_in_a_cluster_without_inter_broker_credentials() -> None:
    assert ClusterPrincipals.from_config(build_config({}), broker_count=3).anonymous_peers
    assert not ClusterPrincipals.from_config(build_config({}), broker_count=1).anonymous_peers
    password = build_config({"security.inter_broker_password_file": "/etc/mqbroker/inter-broker"})
    assert not ClusterPrincipals.from_config(password, broker_count=3).anonymous_peers
    tls = build_config({"security.inter_broker_tls": True})
    assert not ClusterPrincipals.from_config(tls, broker_count=3).anonymous_peers
    supers = ClusterPrincipals.from_config(build_config({"security.super_users": "User:admin, User:ops"}), broker_count=1)
    assert supers.super_users == {"User:admin", "User:ops"}


def test_internal_topics_are_those_with_the_double_underscore() -> None:
    assert is_internal_topic("__consumer_offsets") and is_internal_topic("__mqtt_retained")
    assert not is_internal_topic("_private") and not is_internal_topic("mqtt.messages")
