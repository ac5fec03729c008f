"""Who acts for the cluster: who may replicate, write the internal topics and administer them (pure).

The broker's own traffic never comes from a client:

* **replica fetches** (a Fetch with ``replica_id`` N, which reads past the high watermark and
  moves the high watermark and ISR) are accepted only from ``Broker:N``, the principal a broker
  certificate or the inter-broker SCRAM login proves;
* **internal topics** (``__`` prefix: consumer offsets, MQTT and AMQP state) are written only by
  brokers (``Broker:<id>``: forwarded front-end writes) and the in-process front ends
  (``Service:mqtt``, ``Service:amqp``, which no login yields); no client may create them or
  produce to them (Kafka refuses produce to its internal topics the same way);
* deleting, altering or growing an internal topic, or deleting its records, needs a super user
  (``security.super_users``), a broker or a front end (never the anonymous principal: no broker
  forwards such a call).

A cluster whose brokers reach each other without credentials (no ``inter_broker_tls``, no
inter-broker password: the embedded default, which the documentation says to firewall) cannot
tell a broker from an anonymous client; there, and only when there is more than one broker, the
anonymous principal is taken for a broker.
"""

from __future__ import annotations

from dataclasses import dataclass

from mqbroker import errors
from mqbroker.config import BrokerConfig
from mqbroker.model import ANONYMOUS, Principal
from mqbroker.security.inter_broker import BROKER, broker_node_id

#: Topics whose names start with this belong to the broker (Kafka's ``__consumer_offsets`` convention).
INTERNAL_TOPIC_PREFIX = "__"
#: The principal type of the broker's in-process front ends (``Service:mqtt``, ``Service:amqp``): never a login's.
SERVICE = "Service"


def super_users_of(config: BrokerConfig) -> list[str]:
    """The principals of ``security.super_users`` (comma-separated)."""
    return [name.strip() for name in config.security_super_users.split(",") if name.strip()]


def is_internal_topic(name: str) -> bool:
    """True for the broker's own topics (offsets, MQTT and AMQP state)."""
    return name.startswith(INTERNAL_TOPIC_PREFIX)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterPrincipals:
    """Decides which principals act for the cluster."""

    #: ``security.super_users`` ("User:admin"), who may administer internal topics.
    super_users: frozenset[str] = frozenset()
    #: Brokers reach each other unauthenticated (a cluster without inter-broker credentials).
    anonymous_peers: bool = False

    @classmethod
    def from_config(cls, config: BrokerConfig, *, broker_count: int) -> ClusterPrincipals:
        """Anonymous peers only in a cluster of several brokers without inter-broker credentials."""
        credentials = bool(config.security_inter_broker_password_file) or config.security_inter_broker_tls
        return cls(super_users=frozenset(super_users_of(config)), anonymous_peers=not credentials and broker_count > 1)

    def is_broker(self, principal: Principal) -> bool:
        """True for a broker: ``Broker:<id>``, or the anonymous principal where brokers are not authenticated."""
        return principal.kind == BROKER or (self.anonymous_peers and _anonymous(principal))

    def acts_for_cluster(self, principal: Principal) -> bool:
        """True for a broker or an in-process front end."""
        return principal.kind == SERVICE or self.is_broker(principal)

    def check_replica(self, principal: Principal, replica_id: int) -> None:
        """Raise CLUSTER_AUTHORIZATION_FAILED unless ``principal`` is broker ``replica_id``."""
        proven = broker_node_id(principal)
        if proven == replica_id or (self.anonymous_peers and _anonymous(principal)):
            return
        raise errors.ClusterAuthorizationError(
            f"a replica fetch as replica {replica_id} is accepted only from Broker:{replica_id} (its broker "
            f"certificate or the inter-broker login), not from {principal}")

    def check_internal_write(self, principal: Principal, topic: str) -> None:
        """Raise INVALID_TOPIC_EXCEPTION if a client writes (or creates) an internal topic."""
        if is_internal_topic(topic) and not self.acts_for_cluster(principal):
            raise errors.InvalidTopicError(
                f"topic {topic!r} is internal (names starting with {INTERNAL_TOPIC_PREFIX!r} belong to the broker): "
                f"clients may not create it or produce to it; use a topic without the prefix")

    def check_internal_admin(self, principal: Principal, topic: str, action: str) -> None:
        """Raise TOPIC_AUTHORIZATION_FAILED unless a super user or the cluster administers an internal topic."""
        if is_internal_topic(topic) and not (str(principal) in self.super_users or principal.kind in (BROKER, SERVICE)):
            raise errors.TopicAuthorizationError(
                f"topic {topic!r} is internal: only a super user (security.super_users) may {action} it, "
                f"not {principal}")


def _anonymous(principal: Principal) -> bool:
    """The anonymous principal, from whatever host."""
    return (principal.kind, principal.name) == (ANONYMOUS.kind, ANONYMOUS.name)
