"""The seams of mqbroker, as zope interfaces. Front ends see the broker only through these."""

from __future__ import annotations

from zope.interface import Attribute, Interface


class IBroker(Interface):
    """The one protocol-independent broker API. Every method returns a Deferred.

    Every call carries the calling ``Principal``; the broker consults its ``IAuthorizer``
    before it acts. Failures arrive as ``mqbroker.errors.BrokerError`` subclasses whose
    ``code`` a front end maps onto its own protocol.
    """

    def produce(principal, topic, partition, records, acks, timeout_ms, transactional_id=None, front_end_batches=False,
                add_to_transaction=False):
        """Append ``records`` (one or more RecordBatch v2, as bytes) to a partition.

        ``acks`` (an ``Acks``) says when the Deferred fires with a ``ProduceResult``: once the batch
        is accepted (``NONE``), on the leader's disk (``LEADER``), or held by every in-sync replica
        (``ALL``, waiting at most ``timeout_ms``; 0: ``limits.produce_timeout_ms_default``).
        Transactional batches name their ``transactional_id``; the first of a transaction in a
        partition is verified with its coordinator (KIP-890) and refused with INVALID_TXN_STATE
        unless the partition was added; with ``add_to_transaction`` (transaction version 2, KIP-890
        part 2) the coordinator adds the partition instead, before the batch is appended.
        ``front_end_batches``: an in-process front end built the batches
        itself (``BatchBuilder``, from fields it decoded), so the broker does not decode them again for the
        topic's ``record.validation``; bytes that came from a client are never passed with it.
        """

    def fetch(principal, request):
        """Read whole record batches for the ``FetchPosition``s of a ``FetchRequest`` (long-poll).

        Waits up to ``request.wait_ms_max`` until at least ``request.response_bytes_min`` are
        available, then fires with one ``FetchResult`` per position (an error is carried in the result).
        With ``request.isolation_level`` READ_COMMITTED reads stop at the last stable offset and each
        result lists the aborted transactions its batches overlap.
        """

    def wait_for_records(principal, topic, partition, position, wait_ms_max, isolation_level=0):
        """A notice without the read: fire True once a fetch of the partition from ``position()`` (a callable, asked
        again at every move of the partition's high watermark) would find records below the high watermark
        (``isolation_level`` READ_COMMITTED: the last stable offset) or an error; fire False after ``wait_ms_max``,
        or at once where the broker cannot watch the partition (another broker leads it: the caller long-polls
        ``fetch`` instead). A front end that got some records another way (its own appends, handed out from memory)
        moves ``position`` past them while it waits, and is not woken for them nor made to read them again.
        """

    def replica_fetch(principal, replica_id, request):
        """A follower's fetch (a ``FetchRequest``): batches up to the log end (not the high watermark), or where
        its log diverged.

        Records the follower's position (it holds everything below each ``offset``) for the high
        watermark and the ISR; fires with one ``FetchResult`` per position like ``fetch``.
        """

    def reassign_partition(principal, topic, partition, target_replicas):
        """Move a partition's replicas to ``target_replicas`` (they catch up and join, then the others leave)."""

    def list_reassignments(principal, topics):
        """The reassignments in progress (of ``topics``; None: every topic) as ``PartitionReassignment``s."""

    def list_offset(principal, topic, partition, timestamp_ms, isolation_level=0):
        """Find the earliest (-2), latest (-1: the high watermark, or read_committed the last stable offset)
        or first offset at or after ``timestamp_ms``; -3: the batch holding the largest timestamp (and that timestamp)."""

    def metadata(principal, topics, allow_auto_create):
        """Describe the cluster and ``topics`` (None: every topic) as ``ClusterMetadata``."""

    def create_topic(principal, spec, validate_only):
        """Create the topic ``spec`` (a ``TopicSpec``); fire with None."""

    def delete_topic(principal, name):
        """Delete topic ``name`` and all its data; fire with None."""

    def describe_configs(principal, topic):
        """Fire with the topic's effective configuration as ``{key: value}`` strings."""

    def alter_configs(principal, topic, set_configs, delete_configs):
        """Set and reset topic configuration keys (incrementally); fire with None."""

    def describe_config_layers(principal, topic):
        """Fire with a topic's configuration layer by layer (a ``TopicConfigLayers``; ``topic`` None: the topic
        defaults of this broker, which needs DESCRIBE_CONFIGS on the cluster)."""

    def alter_broker_configs(principal, broker_id, set_configs, delete_configs, validate_only=False):
        """Set and reset dynamic topic defaults (topic keys) of the cluster (``broker_id`` None) or of one broker,
        stored in the cluster metadata (needs ALTER_CONFIGS on the cluster); fire with None."""

    def create_partitions(principal, topic, total_count):
        """Grow ``topic`` to ``total_count`` partitions; fire with None."""

    def delete_records(principal, topic, partition, before_offset):
        """Delete records below ``before_offset``; fire with the new log start offset."""

    def init_producer_id(principal, transactional_id, transaction_timeout_ms=-1):
        """Allocate an idempotent producer id and epoch (``ProducerIdentity``).

        With a ``transactional_id`` (ask its transaction coordinator): the id's stable producer id and
        a new epoch that fences the previous incarnation, whose open transaction is aborted first.
        """

    def describe_quorum(principal):
        """The controller's voters, leader, term, commit index and brokers (a dict, see ``IClusterView.describe``)."""

    def replica_sizes(principal, topic):
        """Fire with ``{partition: bytes on disk}`` of the replicas of ``topic`` this broker holds (DescribeLogDirs)."""

    def find_coordinator(principal, group_id):
        """Fire with the ``BrokerEndpoint`` coordinating ``group_id``: the leader of its offsets partition.

        Fails with COORDINATOR_NOT_AVAILABLE while that partition has no leader (or does not exist yet).
        """

    def join_group(principal, request):
        """Join a consumer group (a ``groups.messages.JoinRequest``); needs READ on the group.

        Fires with a ``groups.messages.JoinResponse`` once the group's rebalance completes (the
        join is parked until then), or fails with the coordinator's typed error.
        """

    def sync_group(principal, request):
        """Fire with the member's ``groups.messages.SyncResponse`` (its assignment) for the generation it joined."""

    def heartbeat(principal, request, polled):
        """Keep a member alive (``polled``: the application polled since the last heartbeat).

        Fires with None, or fails with ``RebalanceInProgressError`` when the member must rejoin.
        """

    def leave_group(principal, request):
        """Remove a member (a ``MemberRequest``) at once; fire with None."""

    def commit_offsets(principal, request):
        """Commit offsets (an ``OffsetCommitRequest``); fire with None once they are durable."""

    def fetch_offsets(principal, group_id, partitions, require_stable=False):
        """Fire with ``{TopicPartition: CommittedOffset | None}`` (``groups.model``, ``groups.offsets``) for
        ``partitions`` (None: all committed). ``require_stable``: fail with UNSTABLE_OFFSET_COMMIT while a
        transaction's offsets for them are pending."""

    def list_groups(principal):
        """Fire with the ``groups.messages.GroupListing``s of the groups the principal may describe."""

    def describe_group(principal, group_id):
        """Fire with the group's ``groups.messages.GroupDescription`` (state Dead when unknown)."""

    def delete_group(principal, group_id):
        """Delete a group without members and its offsets; fire with None."""

    def find_share_coordinator(principal, group_id):
        """Fire with the ``BrokerEndpoint`` hosting share group ``group_id``: the leader of its state partition."""

    def share_group_heartbeat(principal, request):
        """Join, stay in or leave a share group (a ``shares.messages.ShareHeartbeatRequest``); needs READ on
        the group and its topics. Fires with a ``ShareHeartbeatResponse`` (a new group is created on first use).
        """

    def share_fetch(principal, request):
        """Acknowledge, then acquire records of a share group for a lease (a ``ShareFetchRequest``, long-poll).

        Fires with a ``ShareFetchResponse``: per partition the whole batches holding the acquired
        records and their offset ranges with delivery counts, and each acknowledgement's outcome.
        """

    def share_acknowledge(principal, request):
        """Settle acquired records (a ``ShareAcknowledgeRequest``): accept, release, reject or renew.

        Fires with one ``AcknowledgeResult`` per acknowledgement once it is replicated
        (``InvalidRecordStateError`` in a result whose records the member does not hold).
        """

    def create_share_group(principal, group_id, topics, configs):
        """Define a share group over ``topics`` with ``configs`` (see ``shares.settings``); needs ALTER on it."""

    def alter_share_group(principal, group_id, topics, set_configs, delete_configs):
        """Change a share group's topics (None: unchanged) and configs; needs ALTER on it."""

    def delete_share_group(principal, group_id):
        """Delete a share group without members, with its state and scheduled records; needs DELETE."""

    def describe_share_group(principal, group_id):
        """Fire with the ``ShareGroupDescription``: members, partitions, in-flight counts, DLQ depth."""

    def list_share_groups(principal):
        """Fire with the ``ShareGroupListing``s of the share groups hosted here the principal may describe."""
    def delete_offsets(principal, group_id, partitions):
        """Delete a group's committed offsets of ``partitions`` (Kafka's OffsetDelete); fire with
        ``{TopicPartition: None or the error}`` (``GroupSubscribedToTopicError`` where a member subscribes to
        the topic); fail as a whole with ``GroupIdNotFoundError`` for an unknown group."""

    def list_users(principal):
        """Fire with every SCRAM user's name; needs DESCRIBE on the cluster."""

    def upsert_user(principal, name, password, create):
        """Add a user (``create``) or change a user's password (fresh salted SCRAM credentials); needs ALTER on
        the cluster. Fires with None once the record is committed."""

    def remove_user(principal, name):
        """Delete a user; needs ALTER on the cluster. Fires with None once committed."""

    def describe_users(principal):
        """Fire with ``{user name: {security.scram.ScramMechanism: iterations}}`` for every user; needs DESCRIBE
        on the cluster."""

    def alter_scram_credentials(principal, name, upsertions, deletions):
        """Set a user's credentials from (mechanism, salt, iterations, salted password) ``upsertions`` and remove
        those of the ``deletions`` mechanisms (Kafka's AlterUserScramCredentials); a user left without any is
        removed. Needs ALTER on the cluster; fires with None once committed."""

    def list_acls(principal):
        """Fire with every ``security.acl.Acl``; needs DESCRIBE on the cluster."""

    def add_acls(principal, acls):
        """Store ``acls`` (``security.acl.Acl``s); needs ALTER on the cluster. Fires with None once committed."""

    def remove_acls(principal, acls):
        """Delete exactly these ACLs; needs ALTER on the cluster. Fires with None once committed."""

    def find_transaction_coordinator(principal, transactional_id):
        """Fire with the ``BrokerEndpoint`` coordinating ``transactional_id``: the leader of its
        ``__transaction_state`` partition (COORDINATOR_NOT_AVAILABLE while it has none)."""

    def add_partitions_to_txn(principal, request):
        """Add partitions to a producer's ongoing transaction (an ``AddPartitionsRequest``); needs WRITE on the
        transactional id. Fires with None once durable; ``verify_only`` (from a partition leader) only checks."""

    def add_offsets_to_txn(principal, request):
        """Add a group's offsets to the producer's ongoing transaction (an ``AddOffsetsRequest``); fire with None."""

    def end_txn(principal, request):
        """Commit or abort the producer's ongoing transaction (an ``EndTxnRequest``); fire once the decision is
        durable (its markers are then written to every partition): with None, or with the producer's next
        ``ProducerIdAndEpoch`` when the request bumps the epoch (transaction version 2)."""

    def txn_commit_offsets(principal, request):
        """Commit a group's offsets inside a transaction (a ``TxnOffsetCommitRequest``, sent to the group's
        coordinator); they become visible when the transaction commits. Fire with None once durable. With
        ``add_to_transaction`` (transaction version 2) the group's offsets partition joins the transaction
        here (no AddOffsetsToTxn first)."""

    def write_txn_markers(principal, markers):
        """Append the COMMIT/ABORT markers a transaction coordinator asks for (``TransactionMarker``s) to the
        partitions this broker leads; fire with one ``MarkerOutcome`` per partition. Brokers only."""

    def describe_transactions(principal, transactional_ids):
        """Fire with a ``TransactionDescription`` or the typed error, per transactional id (at its coordinator)."""

    def list_transactions(principal, states, producer_ids):
        """Fire with the ``TransactionListing``s this broker coordinates (of ``states`` / ``producer_ids``
        if given) that the principal may describe."""


class IClusterView(Interface):
    """All that the broker core knows of the cluster: the metadata image, its changes and the controller.

    Writes are metadata records proposed to the controller. Each returned Deferred fires once the
    record is committed and applied to this broker's image too (read your writes), or fails with
    the typed ``BrokerError`` that refused it (``NotControllerError`` when the controller moved:
    retry). Admin writes wait until this broker is registered and caught up.
    """

    image = Attribute("The ``MetadataImage`` as of the last record applied on this broker.")
    voters = Attribute("The controller quorum's voters: {node id: (host, controller port)}.")

    def topic(name):
        """The image's ``TopicState`` of topic ``name``, or None."""

    def controller_id():
        """The controller (Raft) leader this broker knows of, or 0 while there is none."""

    def add_image_listener(listener):
        """Call ``listener(image, record)`` after each record applied once this broker caught up.

        ``record`` is None when the whole image may have changed: this broker just caught up, or a
        snapshot replaced the image.
        """

    def describe():
        """Voters, leader, term, commit index and brokers as a dict (``cluster describe``)."""

    def create_topic(name, partitions, configs, replication_factor):
        """Create a topic, its partitions' replicas spread over the live brokers."""

    def delete_topic(name):
        """Delete a topic everywhere."""

    def create_partitions(name, total_count):
        """Grow a topic to ``total_count`` partitions."""

    def alter_configs(name, configs):
        """Replace a topic's config overrides with ``configs``."""

    def alter_broker_configs(entity, set_configs, delete_configs):
        """Set and reset dynamic topic defaults of ``entity`` ("" the cluster, else a broker id)."""

    def alter_partition(record):
        """Commit a partition leader's ISR change (an ``AlterPartition``; refused if its epochs are stale)."""

    def reassign_partition(topic, partition, target_replicas):
        """Start moving a partition to ``target_replicas``."""

    def allocate_producer_ids(count):
        """Reserve ``count`` producer ids cluster-wide; fire with the first."""


class IGenericRecords(Interface):
    """The cluster metadata's generic records (users, ACLs, secrets), for the services that keep their own in it.

    A feature's records are ``PutGenericRecord``s of its kind; the security services read them
    into their credential store and authorizer and write them for the admin requests.
    """

    image = Attribute("The ``MetadataImage`` as of the last record applied on this broker.")

    def add_record_listener(listener):
        """Call ``listener(image, record)`` for every record applied on this broker, caught up or not.

        ``record`` is None when a snapshot replaced the whole image.
        """

    def put_generic_record(kind, key, value):
        """Propose a generic record (``value`` None: delete it); fire once committed and applied here."""

    def when_caught_up():
        """Fire once this broker is registered and its image holds everything committed before that."""


class ISecurityAdmin(Interface):
    """The user and ACL records behind the broker's admin calls; the core authorizes every call first."""

    def list_users():
        """Every user name (a list)."""

    def upsert_user(name, password, create):
        """Propose a user's fresh credentials (``create``: a new user); fire once committed."""

    def remove_user(name):
        """Propose a user's deletion; fire once committed."""

    def describe_users():
        """Every user with the iteration count of its credential of each SCRAM mechanism (a dict of dicts)."""

    def alter_scram_credentials(name, upsertions, deletions):
        """Propose a user's credentials from salted passwords (see ``IBroker.alter_scram_credentials``)."""

    def list_acls():
        """Every ACL (a list of ``security.acl.Acl``)."""

    def add_acls(acls):
        """Propose ``acls``; fire once all are committed."""

    def remove_acls(acls):
        """Propose the deletion of ``acls``; fire once all are committed."""


class IByteRateQuotas(Interface):
    """Byte-rate quotas per principal and client id: how long a flow over its quota is held."""

    has_quotas = Attribute("True if any quota is configured (front ends skip the bookkeeping otherwise).")

    def record(kind, principal, client_id, byte_count, now_ms):
        """Count ``byte_count`` bytes of a ``security.quotas.QuotaKind`` flow; return the ms to hold it (0: none)."""


class IAuthenticationAudit(Interface):
    """The audit log of refused logins (namespace ``mqbroker.audit``)."""

    def authentication_failed(protocol, host, who, reason):
        """Record one refused login or unauthenticated request: which protocol, from where, as whom, why."""


class IAclView(Interface):
    """The ACLs the broker enforces, for a front end that decides on resources of its own (MQTT topic filters)."""

    mqtt_version = Attribute("A number that changes whenever an MQTT topic ACL is added or removed.")

    def acls(resource_type):
        """Every ACL of ``resource_type`` (a ``model.ResourceType``), in a stable order."""

    def is_super_user(principal):
        """Whether ``principal`` is a super user or a broker (allowed everything, ACLs or not)."""

    def report_denial(denial):
        """Audit a refusal the front end decided (a ``security.acl.Denial``)."""


class IAuthorizer(Interface):
    """Decides whether a principal may perform an operation on a resource."""

    def authorize(principal, operation, resource_type, resource_name):
        """Return True to allow. Must be cheap: it runs on every request."""


class IFrontEnd(Interface):
    """A wire protocol, discovered through ``twisted.plugin``: it builds listener factories."""

    name = Attribute("Short protocol name used in configuration, e.g. 'native' or 'mqtt'.")
    config_key = Attribute("The listener's port key in the broker configuration, e.g. 'native_port'.")
    clients_route = Attribute(
        "True if its clients find each partition's leader themselves (Metadata, then re-route): it gets the local "
        "broker. Otherwise (optional, default False) it gets a broker that forwards to the partition leaders."
    )

    def build_factory(broker, context):
        """Return an ``IProtocolFactory`` serving this protocol on top of ``broker`` (an ``IBroker``).

        ``context`` is a ``FrontEndContext`` carrying the reactor, configuration, metrics and the
        connection-level security (authentication, authorization of subscriptions, quotas, audit).
        """


class ISaslExchange(Interface):
    """One server-side SASL exchange: feed it the client's messages until it is complete."""

    complete = Attribute("True once the client is authenticated; ``principal`` is then set.")
    principal = Attribute("The authenticated ``Principal`` (None until ``complete``).")

    def respond(message):
        """Consume the client's next message (bytes) and return the reply (bytes).

        Raises ``SaslAuthenticationError`` for a wrong or malformed message and
        ``IllegalSaslStateError`` for a message after the exchange ended.
        """


class IAuthenticator(Interface):
    """Decides who a client is: SASL exchanges, username/password and client certificates.

    ``secure`` tells whether the connection is TLS; ``host`` is the peer's address, recorded
    in the returned ``Principal`` for host-based ACLs.
    """

    def mechanisms(secure):
        """The SASL mechanism names this connection may use, most preferred first."""

    def start(mechanism, secure, host):
        """Begin a SASL exchange (an ``ISaslExchange``) or raise ``UnsupportedSaslMechanismError``."""

    def authenticate_password(username, password, secure, host):
        """The ``Principal`` for a username and password, or raise ``SaslAuthenticationError``."""

    def authenticate_password_or_anonymous(username, password, secure, host):
        """As ``authenticate_password``, but credentials that cannot be checked (no such user, or PLAIN without
        TLS when that is refused) yield the anonymous principal where anonymous access is allowed."""

    def authenticate_certificate(subject, alternative_names, host):
        """The ``Principal`` mapped from a verified client certificate, or ``SaslAuthenticationError``."""

    def anonymous(host):
        """The principal of a client without credentials, or ``SaslAuthenticationError`` if that is off."""


class IAuthenticatedPeer(Interface):
    """A connection's transport whose peer proved a broker identity (the controller handshake)."""

    peer_node_id = Attribute("The node id the peer proved (an int).")


class IConnectorAdmin(Interface):
    """The connector admin surface (``mqbroker connectors``, the native requests, the HTTP API).

    Every method returns a Deferred and takes the calling ``Principal``: changes need ALTER on the
    cluster, reads DESCRIBE. Failures are ``BrokerError``s: ``InvalidConfigError`` for a configuration
    that does not parse, ``ResourceNotFoundError`` for an unknown connector, ``DuplicateResourceError``
    when creating one that exists. Values are ``mqbroker.connector_model`` types.
    """

    def create(principal, name, config):
        """Check and store a new connector ``name`` with ``config`` ({key: value} strings); fire with None."""

    def pause(principal, name):
        """Stop the connector's tasks, keeping their progress; fire with None."""

    def resume(principal, name):
        """Run a paused connector's tasks again from their progress; fire with None."""

    def delete(principal, name):
        """Stop the connector's tasks and delete its configuration, status and progress; fire with None."""

    def describe(principal, names):
        """Fire with a ``ConnectorDescription`` per connector (``names`` None: every connector), by name."""
